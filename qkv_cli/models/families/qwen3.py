"""Qwen 3: Llama with QK-norm (RMSNorm over head_dim, per head, before RoPE) and head_dim from the config, not
d / tau; sliding as Qwen 2."""

from __future__ import annotations

from qkv_cli.models.families.decoder import block as decoder
from qkv_cli.models.families.decoder import config as decoder_config

BASE = decoder  # everything else: the shared RoPE decoder
MODEL_TYPE = "qwen3"
PREFIXES = ("model.", "")


SPEC = decoder_config.Spec(qk_norm="head", sliding="qwen")


def read_config(keys) -> dict:
    return decoder_config.read(keys, SPEC)
