"""A small converter of tiny transformers Llama 4 (text) models to llama.cpp's `llama4` GGUF, following Llama4Model
in llama.cpp's convert_hf_to_gguf.py (conversion/llama4.py, a LlamaModel), not qkv's code.

- metadata (set_gguf_parameters): TextModel's, with intermediate_size_mlp as feed_forward_length (Llama4Model.
  __init__ swaps the two widths) and expert_count / expert_used_count (num_local_experts, num_experts_per_tok);
  LlamaModel's vocab_size and rope.dimension_count (head_dim); then interleave_moe_layer_step,
  expert_feed_forward_length (the experts' intermediate_size) and attention.sliding_window 0 when every layer is
  full attention. No key for the chunk, the NoPE layers, the query temperature or the QK-norm: llama.cpp fixes them.
- tensors (modify_tensors): no q or k rows permuted (undo_permute = False); experts.gate_up_proj [E, d, 2 d_e]
  transposed and split into gate_proj and up_proj ([E, d_e, d] each), experts.down_proj [E, d_e, d] transposed;
  a `llama3` RoPE as the rope_freqs tensor (LlamaModel.generate_extra_tensors); names from gguf-py's
  TensorNameMap; F32.
"""

from __future__ import annotations

import copy

from gguf_convert import add_named, finish, llama3_rope_freqs, text_parameters, write_vocab

CHUNK, FLOOR_SCALE, ATTN_SCALE = 8192, 8192, 0.1  # what llama.cpp runs every llama4 file with


def expressible(transformers, torch, model, rope: dict | None = None):
    """`model` with what a llama4 file can say: attention_chunk_size 8192, floor_scale 8192 and attn_scale 0.1
    (llama.cpp's fixed values), NoPE every 4th layer and 3 chunked layers to 1 full, the QK-norm on (off only with
    128 experts), the same weights; `rope`: other rope_parameters (a llama3 one's original_max_position_embeddings
    also at the top level, the only place LlamaModel reads it)."""
    c = copy.deepcopy(model.config)
    n = c.num_hidden_layers
    c.attention_chunk_size, c.floor_scale, c.attn_scale = CHUNK, FLOOR_SCALE, ATTN_SCALE
    c.use_qk_norm, c.attn_temperature_tuning = c.num_local_experts != 128, True
    if rope is not None:
        c.rope_parameters = rope
        if "original_max_position_embeddings" in rope:
            c.original_max_position_embeddings = rope["original_max_position_embeddings"]
    c.no_rope_layers = [int((l + 1) % 4 != 0) for l in range(n)]
    c.layer_types = ["chunked_attention" if l % 4 < 3 else "full_attention" for l in range(n)]
    from decoders import eager

    out = transformers.AutoModelForCausalLM.from_config(c, **eager(c.model_type))
    out.load_state_dict(model.state_dict())
    return out.eval()


def parameters(gguf, w, h: dict) -> None:
    text_parameters(gguf, w, h | {"intermediate_size": h["intermediate_size_mlp"]})
    w.add_expert_count(h["num_local_experts"])
    w.add_expert_used_count(h["num_experts_per_tok"])
    w.add_vocab_size(h["vocab_size"])
    w.add_rope_dimension_count(h.get("head_dim") or h["hidden_size"] // h["num_attention_heads"])
    w.add_interleave_moe_layer_step(h["interleave_moe_layer_step"])
    w.add_expert_feed_forward_length(h["intermediate_size"])
    if "layer_types" in h and all(t == "full_attention" for t in h["layer_types"]):
        w.add_sliding_window(0)


def modified(h: dict, name: str, x) -> list:
    """(Hugging Face-style name, array) pairs that Llama4Model.modify_tensors yields for one tensor."""
    if name == "lm_head.weight" and h["tie_word_embeddings"]:
        return []
    if "gate_up_proj" in name:  # [E, d, 2 d_e] -> [E, 2 d_e, d] -> gate, up
        half = x.shape[-1] // 2
        both = x.swapaxes(-1, -2)
        return [(name.replace("gate_up_proj", "gate_proj.weight"), both[..., :half, :]),
                (name.replace("gate_up_proj", "up_proj.weight"), both[..., half:, :])]  # fmt: skip
    if name.endswith("down_proj"):
        return [(name + ".weight", x.swapaxes(-1, -2))]
    return [(name, x)]


def convert(gguf, model, path) -> None:
    """Write a Llama 4 text `model` to `path` as convert_hf_to_gguf.py's Llama4Model does."""
    h = model.config.to_dict()
    arch = gguf.MODEL_ARCH.LLAMA4
    w = gguf.GGUFWriter(str(path), gguf.MODEL_ARCH_NAMES[arch])
    w.add_name("tiny llama4")
    parameters(gguf, w, h)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    write_vocab(w)
    if (factors := llama3_rope_freqs(h | {"model_type": "llama"})) is not None:  # inherited from LlamaModel
        w.add_tensor(f"{gguf.TENSOR_NAMES[gguf.MODEL_TENSOR.ROPE_FREQS]}.weight", factors)
    names = gguf.get_tensor_name_map(arch, h["num_hidden_layers"])
    for name, t in model.state_dict().items():
        for hf, x in modified(h, name, t.detach().numpy()):
            add_named(w, names, hf, x)
    finish(w)
