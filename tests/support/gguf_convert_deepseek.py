"""A small converter of tiny transformers DeepSeek-V3 models to llama.cpp's `deepseek2` GGUF, following
DeepseekV2Model in llama.cpp's convert_hf_to_gguf.py (conversion/deepseek.py), not qkv's code.

- metadata (set_gguf_parameters): TextModel's with num_key_value_heads set to 1 (MLA written as MQA); then
  leading_dense_block_count (first_k_dense_replace), vocab_size, q_lora_rank (when set), kv_lora_rank, key_length
  r_kv + d_rope and value_length r_kv (the latent as one head), key_length_mla d_nope + d_rope and
  value_length_mla d_v, expert_feed_forward_length, expert_count, expert_shared_count, expert_weights_scale,
  expert_weights_norm (when true), rope.dimension_count d_rope, and 0.1 mscale_all_dim as yarn_log_multiplier.
- tensors (modify_tensors): each layer's experts stacked into one (E, ...) tensor per projection,
  e_score_correction_bias renamed e_score_correction.bias; kv_b_proj split per head into k_b_proj (W^UK
  transposed: (tau, r_kv, d_nope)) and v_b_proj ((tau, d_v, r_kv)); no RoPE rows permuted; names from gguf-py's
  TensorNameMap; F32.
"""

from __future__ import annotations

import numpy as np
from gguf_convert import add_named, finish, write_vocab


def parameters(gguf, w, h: dict) -> None:
    w.add_block_count(h["num_hidden_layers"])
    w.add_context_length(h["max_position_embeddings"])
    w.add_embedding_length(h["hidden_size"])
    w.add_feed_forward_length(h["intermediate_size"])
    w.add_head_count(h["num_attention_heads"])
    w.add_head_count_kv(1)
    rope = h.get("rope_parameters") or {}
    if rope.get("rope_type") == "yarn":
        w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        w.add_rope_scaling_factor(rope["factor"])
        w.add_rope_scaling_orig_ctx_len(rope["original_max_position_embeddings"])
    w.add_rope_freq_base(rope["rope_theta"])
    w.add_layer_norm_rms_eps(h["rms_norm_eps"])
    w.add_leading_dense_block_count(h["first_k_dense_replace"])
    w.add_vocab_size(h["vocab_size"])
    if h.get("q_lora_rank") is not None:
        w.add_q_lora_rank(h["q_lora_rank"])
    r, dr = h["kv_lora_rank"], h["qk_rope_head_dim"]
    w.add_kv_lora_rank(r)
    w.add_key_length(r + dr)
    w.add_value_length(r)
    w.add_key_length_mla(h["qk_nope_head_dim"] + dr)
    w.add_value_length_mla(h["v_head_dim"])
    w.add_expert_feed_forward_length(h["moe_intermediate_size"])
    w.add_expert_count(h["n_routed_experts"])  # TextModel: expert_count, expert_used_count, the groups, gating
    w.add_expert_used_count(h["num_experts_per_tok"])
    if h.get("n_group") is not None:
        w.add_expert_group_count(h["n_group"])
    if h.get("topk_group") is not None:
        w.add_expert_group_used_count(h["topk_group"])
    if h["model_type"] == "deepseek_v3":  # DeepSeek-V3's config.json says scoring_func "sigmoid" (v5 drops it)
        w.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID)
    w.add_expert_shared_count(h["n_shared_experts"])
    w.add_expert_weights_scale(h["routed_scaling_factor"])
    if h.get("norm_topk_prob"):
        w.add_expert_weights_norm(True)
    w.add_rope_dimension_count(dr)
    if rope.get("mscale_all_dim") is not None:
        w.add_rope_scaling_yarn_log_mul(0.1 * rope["mscale_all_dim"])


def modified(h: dict, name: str, x, held: dict) -> list:
    """(Hugging Face-style name, array) pairs that modify_tensors yields for one tensor; held: a layer's experts
    until all are there (then stacked, one (E, ...) tensor per projection)."""
    if name == "lm_head.weight" and h["tie_word_embeddings"]:
        return []
    if name.endswith("e_score_correction_bias"):  # gguf-py's name: e_score_correction.bias
        return [(name.replace("e_score_correction_bias", "e_score_correction.bias"), x)]
    if ".mlp.experts." in name:
        held[name] = x
        layer, E = name.split(".mlp.experts.")[0], h["n_routed_experts"]
        if sum(k.startswith(layer + ".") for k in held) < 3 * E:
            return []
        out = []
        for w_name in ("down_proj", "gate_proj", "up_proj"):
            names = [f"{layer}.mlp.experts.{e}.{w_name}.weight" for e in range(E)]
            out.append((f"{layer}.mlp.experts.{w_name}.weight", np.stack([held.pop(n) for n in names])))
        return out
    if name.endswith("kv_b_proj.weight"):
        tau, dn, dv = h["num_attention_heads"], h["qk_nope_head_dim"], h["v_head_dim"]
        kv_b = x.reshape(tau, dn + dv, x.shape[-1])
        k_b, v_b = kv_b[:, :dn].transpose(0, 2, 1), kv_b[:, dn:]
        return [(name.replace("kv_b_proj", "k_b_proj"), k_b), (name.replace("kv_b_proj", "v_b_proj"), v_b)]
    return [(name, x)]


def convert(gguf, model, path, folder) -> None:
    """Write a DeepSeek-V3 (or V2) `model`, saved in `folder`, to `path` as convert_hf_to_gguf.py's DeepseekV2Model
    does: from the folder's safetensors (one matrix per expert, as transformers saves them; its modules hold them
    fused)."""
    from safetensors.numpy import load_file

    h = model.config.to_dict()
    arch = gguf.MODEL_ARCH.DEEPSEEK2
    w = gguf.GGUFWriter(str(path), gguf.MODEL_ARCH_NAMES[arch])
    w.add_name("tiny deepseek")
    parameters(gguf, w, h)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    write_vocab(w)
    names = gguf.get_tensor_name_map(arch, h["num_hidden_layers"])
    held: dict = {}
    for name, stored in load_file(folder / "model.safetensors").items():
        for hf, x in modified(h, name, stored, held):
            add_named(w, names, hf, x)
    finish(w)
