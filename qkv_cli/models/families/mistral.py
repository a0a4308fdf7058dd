"""Mistral: Llama with a sliding window on every layer: key t is allowed for query i iff 0 <= i - t < sliding_window."""

from __future__ import annotations

from qkv_cli.models.families.decoder import block as decoder
from qkv_cli.models.families.decoder import config as decoder_config

BASE = decoder  # everything else: the shared RoPE decoder
MODEL_TYPE = "mistral"
PREFIXES = ("model.", "")


SPEC = decoder_config.Spec(sliding="all")


def read_config(keys) -> dict:
    return decoder_config.read(keys, SPEC)
