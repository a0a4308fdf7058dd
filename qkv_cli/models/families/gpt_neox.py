"""GPT-NeoX (Pythia): partial rotary (only the first rotary_pct of each head turns), parallel residual, LayerNorm,
and one fused query_key_value matrix laid out head by head ([q_h | k_h | v_h] for each head h)."""

from __future__ import annotations

from qkv_cli.models.families.decoder import block as decoder
from qkv_cli.models.families.decoder import config as decoder_config

BASE = decoder  # everything else: the shared RoPE decoder
MODEL_TYPE = "gpt_neox"
PREFIXES = ("gpt_neox.", "")
HEAD = "embed_out.weight"


SPEC = decoder_config.Spec(
    layout="neox",
    names="neox",
    norm="layer",
    act=("hidden_act", "gelu"),
    eps="layer_norm_eps",
    bias=("attention_bias", True),
    mlp_bias=True,
    parallel_residual=True,
    partial=("rotary_pct", 0.25),
    theta=("rotary_emb_base", 10000.0),
    grouped=False,
)


def read_config(keys) -> dict:
    return decoder_config.read(keys, SPEC)
