"""OLMoE: OLMo's attention with QK-norm over the whole q and k projections (before splitting heads), norms before
attention and the MLP as Llama, and a mixture of experts in every layer.

    g = Softmax(x W_r^T) over num_experts; the k largest (num_experts_per_tok), renormalised only when norm_topk_prob
    (false by default: the k weights then sum to less than 1)
    MoE(x) = sum_j g_j W_down[e_j] (silu(W_gate[e_j] x) * W_up[e_j] x)     each expert intermediate_size wide
"""

from __future__ import annotations

from qkv_cli.errors import QkvError
from qkv_cli.models.families.decoder import block as decoder
from qkv_cli.models.families.decoder import config as decoder_config
from qkv_cli.models.families.decoder.moe import MoeKeys

BASE = decoder  # everything else: the shared RoPE decoder
MODEL_TYPE = "olmoe"
PREFIXES = ("model.", "")
MOE = MoeKeys(experts=("num_experts", "num_local_experts", 64), top_k=("num_experts_per_tok", 8),
              d_expert=("intermediate_size",), normalise=("norm_topk_prob", False), names="qwen")  # fmt: skip
SPEC = decoder_config.Spec(qk_norm="flat", moe=MOE)


def read_config(keys) -> dict:
    if keys.get("clip_qkv", None) is not None:
        raise QkvError(f"{keys.where}: clip_qkv is not supported (qkv runs OLMoE without clipping Q, K and V)")
    return decoder_config.read(keys, SPEC)
