"""Gemma 2: attention logits soft-capped (tanh(s / c) c, before the mask), scale query_pre_attn_scalar^-1/2,
sliding and global layers alternating, RMSNorm as x_norm (1 + w), embeddings times sqrt(d), norms before and after
attention and the MLP, GELU-tanh, tied output."""

from __future__ import annotations

from qkv_cli.models.families.decoder import block as decoder
from qkv_cli.models.families.decoder import config as decoder_config

BASE = decoder  # everything else: the shared RoPE decoder
MODEL_TYPE = "gemma2"
PREFIXES = ("model.", "")


SPEC = decoder_config.Spec(
    layout="gemma",
    norm="rms1p",
    act=("hidden_activation", "hidden_act", "gelu_pytorch_tanh"),
    softcap=True,
    embed_scale=True,
    tie=True,
    sliding="alternate",
    scale_key="query_pre_attn_scalar",
)


def read_config(keys) -> dict:
    return decoder_config.read(keys, SPEC)
