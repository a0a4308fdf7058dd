"""llama.cpp's `deepseek2` GGUF files (DeepSeek-V2 and V3, DeepseekV2Model in convert_hf_to_gguf.py) as
Hugging Face's deepseek_v3 / deepseek_v2 checkpoints.

What the converter changed is undone here: it writes multi-head latent attention as one key/value head
(head_count_kv 1, key_length r_kv + d_rope), its own widths as key_length_mla / value_length_mla; it splits
kv_b_proj into attn_k_b (per head W^UK transposed, (tau, r_kv, d_nope)) and attn_v_b ((tau, d_v, r_kv)), or keeps
attn_kv_b (older files); it stacks each MoE layer's experts into ffn_{gate,up,down}_exps (E, ...) and names the
router's correction bias exp_probs_b. It permutes no RoPE rows: llama.cpp turns DeepSeek's interleaved pairs as they
are. The experts are read each alone from their stack, and the router as ffn_gate_inp (models.formats.gguf.experts).
The router: expert_gating_func 2 (sigmoid) is DeepSeek-V3's; 1 or absent (softmax) DeepSeek-V2's.
"""

from __future__ import annotations

import numpy as np

from qkv_cli.errors import QkvError
from qkv_cli.models.formats.safetensors import Tensor

LAYER_NAMES = {  # blk.N.<name> -> model.layers.N.<name>
    "attn_q_a": "self_attn.q_a_proj", "attn_q_a_norm": "self_attn.q_a_layernorm", "attn_q_b": "self_attn.q_b_proj",
    "attn_kv_a_mqa": "self_attn.kv_a_proj_with_mqa", "attn_kv_a_norm": "self_attn.kv_a_layernorm",
    "attn_kv_b": "self_attn.kv_b_proj", "ffn_gate_shexp": "mlp.shared_experts.gate_proj",
    "ffn_up_shexp": "mlp.shared_experts.up_proj", "ffn_down_shexp": "mlp.shared_experts.down_proj",
}  # fmt: skip
GATING = {1: "softmax", 2: "sigmoid"}  # llama.cpp's LLAMA_EXPERT_GATING_FUNC_TYPE


def config(raw: dict, meta: dict, tensors: dict, where: str) -> None:
    """Fill raw (config.json keys) with a deepseek2 file's MLA and MoE keys."""
    a = "deepseek2."

    def get(key):
        value = meta.get(a + key)
        return value if type(value) is int else None

    rope = get("rope.dimension_count")
    k_mla, v_mla = get("attention.key_length_mla"), get("attention.value_length_mla")
    if k_mla is None:  # older files: key_length and value_length were MLA's own widths
        k_mla, v_mla = get("attention.key_length"), get("attention.value_length")
    raw.update({
        "qk_rope_head_dim": rope, "head_dim": rope, "kv_lora_rank": get("attention.kv_lora_rank"),
        "q_lora_rank": get("attention.q_lora_rank"), "v_head_dim": v_mla,
        "qk_nope_head_dim": None if k_mla is None or rope is None else k_mla - rope,
        "num_key_value_heads": raw.get("num_attention_heads"),  # one latent "head" in the file, every head here
        "rope_interleave": True, "first_k_dense_replace": get("leading_dense_block_count") or 0,
        "attention_bias": "blk.0.attn_kv_a_mqa.bias" in tensors,
    })  # fmt: skip
    experts, gating = get("expert_count"), get("expert_gating_func") or 1  # absent: softmax (DeepSeek-V2's files)
    if gating not in GATING:
        raise QkvError(f"{where}: deepseek2.expert_gating_func {gating} is not supported: 1 (softmax) or 2 (sigmoid)")
    raw["model_type"] = "deepseek_v3" if gating == 2 or not experts else "deepseek_v2"
    if experts:
        groups = get("expert_group_count") or 1
        raw.update({
            "n_routed_experts": experts, "num_experts_per_tok": get("expert_used_count"),
            "moe_intermediate_size": get("expert_feed_forward_length"), "n_shared_experts": get("expert_shared_count"),
            "routed_scaling_factor": meta.get(a + "expert_weights_scale", 1.0),
            "norm_topk_prob": meta.get(a + "expert_weights_norm", False) is True, "n_group": groups,
            "topk_group": get("expert_group_used_count") or 1,
            "topk_method": "group_limited_greedy" if groups > 1 else "greedy",
        })  # fmt: skip
    log_mul = meta.get(a + "rope.scaling.yarn_log_multiplier")
    if isinstance(raw.get("rope_scaling"), dict) and isinstance(log_mul, int | float) and log_mul > 0:
        # llama.cpp keeps 0.1 mscale_all_dim; DeepSeek's configs have mscale = mscale_all_dim
        raw["rope_scaling"] |= {"mscale_all_dim": log_mul / 0.1, "mscale": log_mul / 0.1}


def tensors(out: dict[str, Tensor], gguf: dict[str, Tensor], raw: dict) -> dict[str, Tensor]:
    """out (the generic names) with kv_b_proj joined from attn_k_b and attn_v_b, and the correction bias named."""
    tau, dn, dv = raw.get("num_attention_heads"), raw.get("qk_nope_head_dim"), raw.get("v_head_dim")
    for name, t in gguf.items():
        parts = name.split(".")
        if len(parts) != 4 or parts[0] != "blk" or not parts[1].isdigit():
            continue
        layer, stem = f"model.layers.{int(parts[1])}.", parts[2]
        if stem == "attn_k_b" and f"blk.{parts[1]}.attn_v_b.weight" in gguf:
            v = gguf[f"blk.{parts[1]}.attn_v_b.weight"]
            if (
                len(t.shape) != 3
                or len(v.shape) != 3
                or (t.shape[0], t.shape[2]) != (tau, dn)
                or v.shape[:2] != (tau, dv)
            ):
                raise QkvError(f"GGUF tensors {name!r} {list(t.shape)} and attn_v_b {list(v.shape)} are not "
                               f"(tau, r_kv, d_nope) and (tau, d_v, r_kv) for tau={tau}")  # fmt: skip
            out[layer + "self_attn.kv_b_proj.weight"] = Tensor((tau * (dn + dv), t.shape[1]), t.kind,
                                                               _joined(t.read, v.read), t.source)  # fmt: skip
        elif stem == "exp_probs_b":  # DeepSeek-V3's correction bias
            out[layer + "mlp.gate.e_score_correction_bias"] = t
    return out


def _joined(k_read, v_read):  # -> (tau (d_nope + d_v), r_kv): per head [W^UK rows | W^UV rows], kv_b_proj's layout
    def read():
        k, v = k_read(), v_read()  # (tau, r_kv, d_nope), (tau, d_v, r_kv)
        return np.concatenate([k.transpose(0, 2, 1), v], axis=1).reshape(-1, k.shape[1])

    return read
