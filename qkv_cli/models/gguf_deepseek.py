"""llama.cpp's `deepseek2` GGUF files (DeepSeek-V2 and V3, DeepseekV2Model in convert_hf_to_gguf.py) as
Hugging Face's deepseek_v3 / deepseek_v2 checkpoints.

What the converter changed is undone here: it writes multi-head latent attention as one key/value head
(head_count_kv 1, key_length r_kv + d_rope), its own widths as key_length_mla / value_length_mla; it splits
kv_b_proj into attn_k_b (per head W^UK transposed, (tau, r_kv, d_nope)) and attn_v_b ((tau, d_v, r_kv)), or keeps
attn_kv_b (older files). It permutes no RoPE rows: llama.cpp turns DeepSeek's interleaved pairs as they are. Files
with mixture-of-experts layers are refused (their expert tensors are not mapped yet).
"""

from __future__ import annotations

import numpy as np

from qkv_cli.errors import QkvError
from qkv_cli.models.weights import Tensor

LAYER_NAMES = {  # blk.N.<name> -> model.layers.N.<name>
    "attn_q_a": "self_attn.q_a_proj", "attn_q_a_norm": "self_attn.q_a_layernorm", "attn_q_b": "self_attn.q_b_proj",
    "attn_kv_a_mqa": "self_attn.kv_a_proj_with_mqa", "attn_kv_a_norm": "self_attn.kv_a_layernorm",
    "attn_kv_b": "self_attn.kv_b_proj",
}  # fmt: skip


def config(raw: dict, meta: dict, tensors: dict, where: str) -> None:
    """Fill raw (config.json keys) with a deepseek2 file's MLA keys."""
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
    dense, layers = raw["first_k_dense_replace"], raw.get("num_hidden_layers")
    if get("expert_count") and type(layers) is int and dense < layers:
        raise QkvError(f"{where}: the mixture-of-experts layers of a deepseek2 file (from layer {dense}) are not "
                       "supported yet: only files whose every layer is dense (leading_dense_block_count = "
                       "block_count) are read")  # fmt: skip
    log_mul = meta.get(a + "rope.scaling.yarn_log_multiplier")
    if isinstance(raw.get("rope_scaling"), dict) and isinstance(log_mul, int | float) and log_mul > 0:
        # llama.cpp keeps 0.1 mscale_all_dim; DeepSeek's configs have mscale = mscale_all_dim
        raw["rope_scaling"] |= {"mscale_all_dim": log_mul / 0.1, "mscale": log_mul / 0.1}


def tensors(out: dict[str, Tensor], gguf: dict[str, Tensor], raw: dict) -> dict[str, Tensor]:
    """out (the generic names) with kv_b_proj joined from attn_k_b and attn_v_b."""
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
    return out


def _joined(k_read, v_read):  # -> (tau (d_nope + d_v), r_kv): per head [W^UK rows | W^UV rows], kv_b_proj's layout
    def read():
        k, v = k_read(), v_read()  # (tau, r_kv, d_nope), (tau, d_v, r_kv)
        return np.concatenate([k.transpose(0, 2, 1), v], axis=1).reshape(-1, k.shape[1])

    return read
