"""Phi-3 (and Phi-3.5, Phi-4-mini): Llama with fused projections, partial rotary and LongRoPE.

    [Q | K | V] = x W_qkv^T      one `qkv_proj` matrix, rows tau d_k + 2 G d_k (split as Q, K, V)
    [g | u] = x W_gate_up^T      one `gate_up_proj` matrix, rows 2 d_ff; the MLP is W_down (act(g) * u)

`partial_rotary_factor` turns only the first part of each head (Phi-4-mini: 3/4). LongRoPE (`rope_type`
"longrope", older files "su" or "yarn") divides each pair's frequency by `short_factor` while the text is within
`original_max_position_embeddings` and by `long_factor` beyond it, and scales cos and sin by
sqrt(1 + ln(factor) / ln(original)). With `sliding_window` every layer keeps a window (Phi-3-mini).
"""

from __future__ import annotations

from qkv_cli.models.families.decoder import block as decoder
from qkv_cli.models.families.decoder import config as decoder_config

BASE = decoder  # everything else: the shared RoPE decoder
MODEL_TYPE = "phi3"
PREFIXES = ("model.", "")


SPEC = decoder_config.Spec(
    names="phi3",
    sliding="all",
    partial=("partial_rotary_factor", 1.0),
    rope_kinds=("default", "longrope"),
    rope_aliases=(("su", "longrope"), ("yarn", "longrope")),
)


def read_config(keys) -> dict:
    return decoder_config.read(keys, SPEC)
