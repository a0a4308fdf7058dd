"""Llama (and SmolLM): RoPE (rotate_half), grouped-query attention, RMSNorm, SwiGLU MLP, tied or untied output.

The plain RoPE decoder of decoder.py. RoPE scaling types default, linear, dynamic, llama3 and yarn are read from
`rope_parameters` (transformers v5) or `rope_theta` and `rope_scaling` (older files).
"""

from __future__ import annotations

from qkv_cli.models.families.decoder import block as decoder
from qkv_cli.models.families.decoder import config as decoder_config

BASE = decoder  # everything else: the shared RoPE decoder
MODEL_TYPE = "llama"
PREFIXES = ("model.", "")


SPEC = decoder_config.Spec()  # the plain RoPE decoder


def read_config(keys) -> dict:
    return decoder_config.read(keys, SPEC)
