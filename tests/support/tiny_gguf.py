"""A tiny llama GGUF file written by gguf-py's GGUFWriter (2 layers, d 16, 2 heads, qkv's small BPE vocabulary),
random weights: a model file for tests about finding and loading, not about numbers."""

from __future__ import annotations

import numpy as np
from gguf_convert import text_parameters, write_vocab

D, FF, LAYERS, HEADS = 16, 32, 2, 2


def write_tiny_gguf(gguf, path, seed: int = 0) -> None:
    h = {"num_hidden_layers": LAYERS, "max_position_embeddings": 64, "hidden_size": D, "intermediate_size": FF,
         "num_attention_heads": HEADS, "num_key_value_heads": HEADS, "rope_parameters": {"rope_theta": 10000.0},
         "rms_norm_eps": 1e-5}  # fmt: skip
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("tiny llama")
    text_parameters(gguf, w, h)
    w.add_rope_dimension_count(D // HEADS)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    write_vocab(w)
    n_vocab = len(w.kv_data[0]["tokenizer.ggml.tokens"].value)
    w.add_vocab_size(n_vocab)
    rng = np.random.default_rng(seed)

    def add(name, *shape):
        w.add_tensor(name, rng.normal(0, 0.1 if len(shape) > 1 else 1, shape).astype(np.float32))

    add("token_embd.weight", n_vocab, D)
    add("output_norm.weight", D)
    add("output.weight", n_vocab, D)
    for i in range(LAYERS):
        add(f"blk.{i}.attn_norm.weight", D)
        for t in ("attn_q", "attn_k", "attn_v", "attn_output"):
            add(f"blk.{i}.{t}.weight", D, D)
        add(f"blk.{i}.ffn_norm.weight", D)
        add(f"blk.{i}.ffn_gate.weight", FF, D)
        add(f"blk.{i}.ffn_up.weight", FF, D)
        add(f"blk.{i}.ffn_down.weight", D, FF)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
