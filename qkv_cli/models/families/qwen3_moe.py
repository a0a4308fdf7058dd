"""Qwen3-MoE: Qwen 3 (QK-norm per head before RoPE, head_dim from the config) with a mixture of experts.

    g = Softmax(x W_r^T) over num_experts; the k largest (num_experts_per_tok), renormalised when norm_topk_prob
    MoE(x) = sum_j g_j W_down[e_j] (silu(W_gate[e_j] x) * W_up[e_j] x)     each expert moe_intermediate_size wide

Layers in `mlp_only_layers`, and those whose number (from 1) is not a multiple of `decoder_sparse_step`, keep a
dense MLP of intermediate_size. With `use_sliding_window`, every layer keeps a window of `sliding_window` keys
(transformers' Qwen3-MoE reads no max_window_layers).
"""

from __future__ import annotations

from qkv_cli.models.families.decoder import block as decoder
from qkv_cli.models.families.decoder import config as decoder_config
from qkv_cli.models.families.decoder.moe import MoeKeys

BASE = decoder  # everything else: the shared RoPE decoder
MODEL_TYPE = "qwen3_moe"
PREFIXES = ("model.", "")
MOE = MoeKeys(experts=("num_experts", "num_local_experts", 128), top_k=("num_experts_per_tok", 8),
              d_expert=("moe_intermediate_size", 768), normalise=("norm_topk_prob", False), sparse_step=True,
              names="qwen")  # fmt: skip
SPEC = decoder_config.Spec(qk_norm="head", sliding="switch", moe=MOE)


def read_config(keys) -> dict:
    return decoder_config.read(keys, SPEC)
