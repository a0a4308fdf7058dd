"""Qwen 2: Llama with biases on W^q, W^k and W^v (not W^o); sliding only on the layers `layer_types` (or
`use_sliding_window` and `max_window_layers`) say."""

from __future__ import annotations

from qkv_cli.models.families.decoder import block as decoder
from qkv_cli.models.families.decoder import config as decoder_config

BASE = decoder  # everything else: the shared RoPE decoder
MODEL_TYPE = "qwen2"
PREFIXES = ("model.", "")


SPEC = decoder_config.Spec(bias=(True, False), sliding="qwen")


def read_config(keys) -> dict:
    return decoder_config.read(keys, SPEC)
