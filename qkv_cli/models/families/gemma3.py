"""Gemma 3 (text): Gemma 2 with QK-norm, `layer_types` (or `sliding_window_pattern`: 5 sliding layers then a global
one), and a RoPE base of its own for sliding layers (`rope_local_base_freq`, or per-layer-type `rope_parameters`)."""

from __future__ import annotations

from qkv_cli.models.families.decoder import block as decoder
from qkv_cli.models.families.decoder import config as decoder_config

BASE = decoder  # everything else: the shared RoPE decoder
MODEL_TYPE = "gemma3_text"
PREFIXES = ("model.language_model.", "model.", "language_model.model.", "")


SPEC = decoder_config.Spec(
    layout="gemma",
    norm="rms1p",
    act=("hidden_activation", "hidden_act", "gelu_pytorch_tanh"),
    qk_norm="head",
    softcap=True,
    embed_scale=True,
    tie=True,
    sliding="pattern",
    scale_key="query_pre_attn_scalar",
    theta=("rope_theta", 1_000_000.0),
    local_theta=("rope_local_base_freq", 10_000.0),
)


def read_config(keys) -> dict:
    return decoder_config.read(keys, SPEC)
