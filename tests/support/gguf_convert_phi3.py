"""Phi-3 to GGUF as llama.cpp's convert_hf_to_gguf.py does it (Phi3MiniModel, conversion/phi.py of
ggml-org/llama.cpp), beside tests/support/gguf_convert.py (whose vocabulary writer it uses).

- metadata (set_gguf_parameters, which does not call TextModel's: no rope scaling type, no key_length): context
  length, rope.scaling.original_context_length, embedding and feed-forward lengths, block count, head counts, the
  RMS norm epsilon, rope.dimension_count int(partial_rotary_factor * d) // tau, rope.freq_base, sliding_window (0
  when the config has none). TextModel.__init__ mirrors the top-level partial_rotary_factor and
  original_max_position_embeddings into rope_parameters, where the class reads them.
- generate_extra_tensors (written before the model's tensors): with a long_factor, the LongRoPE scale
  rope.scaling.attn_factor = sqrt(1 + ln(s) / ln(original)), s = max_position_embeddings / original (1 when
  s <= 1), and rope_factors_long, rope_factors_short, F32 [rot/2].
- tensors: no modify_tensors of its own: qkv_proj -> attn_qkv and gate_up_proj -> ffn_up as they are (gguf-py's
  TensorNameMap), nothing permuted; a tied model's checkpoint holds no lm_head. F32.
With split, each attn_qkv is written as attn_q, attn_k and attn_v (rows Q, K, V), which llama.cpp also reads
(create_tensor_qkv); the converter itself always writes attn_qkv.
"""

from __future__ import annotations

import math

import numpy as np
from gguf_convert import add_named, finish, write_vocab


def rope_parameters(h: dict) -> dict:
    """TextModel.__init__: rope_parameters with the top-level keys mirrored in where absent."""
    rope = dict(h.get("rope_parameters", h.get("rope_scaling")) or {})
    for key in ("rope_theta", "partial_rotary_factor", "original_max_position_embeddings"):
        if key not in rope and h.get(key) is not None:
            rope[key] = h[key]
    return rope


def parameters(w, h: dict, rope: dict) -> None:
    """Phi3MiniModel.set_gguf_parameters."""
    n_embd, n_head = h["hidden_size"], h["num_attention_heads"]
    rope_dims = int(rope.get("partial_rotary_factor", 1.0) * n_embd) // n_head
    w.add_context_length(h["max_position_embeddings"])
    w.add_rope_scaling_orig_ctx_len(rope["original_max_position_embeddings"])
    w.add_embedding_length(n_embd)
    w.add_feed_forward_length(h["intermediate_size"])
    w.add_block_count(h["num_hidden_layers"])
    w.add_head_count(n_head)
    w.add_head_count_kv(h["num_key_value_heads"])
    w.add_layer_norm_rms_eps(h["rms_norm_eps"])
    w.add_rope_dimension_count(rope_dims)
    w.add_rope_freq_base(rope.get("full_attention", rope)["rope_theta"])
    w.add_sliding_window(h.get("sliding_window") or 0)


def extra_tensors(gguf, w, h: dict, rope: dict) -> list:
    """Phi3MiniModel.generate_extra_tensors: (name, F32 array) of the LongRoPE factors, and the attn_factor key."""
    long_factors, short_factors = rope.get("long_factor"), rope.get("short_factor")
    if not long_factors:
        return []
    original = rope["original_max_position_embeddings"]
    scale = h["max_position_embeddings"] / original
    kind = rope.get("rope_type", "").lower()
    if kind in ("su", "longrope"):
        attn_factor = math.sqrt(1 + math.log(scale) / math.log(original)) if scale > 1.0 else 1.0
    else:  # yarn
        attn_factor = 0.1 * math.log(scale) + 1.0 if scale > 1.0 else 1.0
    w.add_rope_scaling_attn_factors(attn_factor)
    rope_dims = int(rope.get("partial_rotary_factor", 1.0) * h["hidden_size"]) // h["num_attention_heads"]
    assert len(long_factors) == len(short_factors) == rope_dims / 2
    long_name, short_name = (gguf.TENSOR_NAMES[t] for t in (gguf.MODEL_TENSOR.ROPE_FACTORS_LONG,
                                                            gguf.MODEL_TENSOR.ROPE_FACTORS_SHORT))  # fmt: skip
    return [(f"{long_name}.weight", np.asarray(long_factors, dtype=np.float32)),
            (f"{short_name}.weight", np.asarray(short_factors, dtype=np.float32))]  # fmt: skip


def convert(gguf, model, path, split: bool = False) -> None:
    """Write a Phi-3 `model` to `path` as Phi3MiniModel does (split: attn_q, attn_k, attn_v for attn_qkv)."""
    h = model.config.to_dict()
    rope = rope_parameters(h)
    arch = gguf.MODEL_ARCH.PHI3
    w = gguf.GGUFWriter(str(path), gguf.MODEL_ARCH_NAMES[arch])
    w.add_name("tiny phi3")
    parameters(w, h, rope)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    extra = extra_tensors(gguf, w, h, rope)
    write_vocab(w)
    for name, x in extra:
        w.add_tensor(name, x)
    names = gguf.get_tensor_name_map(arch, h["num_hidden_layers"])
    tau, G = h["num_attention_heads"], h["num_key_value_heads"]
    d_k = h["hidden_size"] // tau
    for name, t in model.state_dict().items():
        if name == "lm_head.weight" and h["tie_word_embeddings"]:
            continue
        x = t.detach().numpy()
        parts = [(name, x)]
        if split and name.endswith("qkv_proj.weight"):
            q, k = tau * d_k, G * d_k
            parts = [(name.replace("qkv_proj", p), rows) for p, rows in
                     (("q_proj", x[:q]), ("k_proj", x[q : q + k]), ("v_proj", x[q + k :]))]  # fmt: skip
        for hf, y in parts:
            add_named(w, names, hf, y)
    finish(w)
