"""Mixtral: Mistral with a mixture of experts in every layer's MLP (Jiang et al. 2024, "Mixtral of Experts").

    g = Softmax(x W_r^T) over the E experts (num_local_experts); the k largest (num_experts_per_tok), renormalised
    MoE(x) = sum_j g_j W_2[e_j] (silu(W_1[e_j] x) * W_3[e_j] x)        each expert as wide as intermediate_size

The attention is Mistral's (a window on every layer when `sliding_window` is set).
"""

from __future__ import annotations

from qkv_cli.models.families.decoder import block as decoder
from qkv_cli.models.families.decoder import config as decoder_config
from qkv_cli.models.families.decoder.moe import MoeKeys

BASE = decoder  # everything else: the shared RoPE decoder
MODEL_TYPE = "mixtral"
PREFIXES = ("model.", "")
SPEC = decoder_config.Spec(sliding="all", theta=("rope_theta", 1e6), moe=MoeKeys())


def read_config(keys) -> dict:
    return decoder_config.read(keys, SPEC)
