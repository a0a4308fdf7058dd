"""Hugging Face's names of a mixture of experts' tensors, shared by the MoE families (families.decoder.moe) and
the GGUF reader (formats.gguf.experts), which stores them under llama.cpp's names."""

from __future__ import annotations

# the MoE sub-module, then the router's and each expert's W_gate, W_up, W_down names (Hugging Face); None: the
# family names its own experts (Llama 4's stacked ones)
PROJ = ("gate_proj", "up_proj", "down_proj")
NAMES = {
    "mixtral": ("block_sparse_moe", "gate", ("w1", "w3", "w2")),
    "qwen": ("mlp", "gate", PROJ),
    "deepseek": ("mlp", "gate", PROJ),
    "llama4": ("feed_forward", "router", None),
}
SHARED = {"deepseek": "shared_experts", "llama4": "shared_expert"}  # the shared expert(s)' sub-module (PROJ names)
CORRECTION = "e_score_correction_bias"  # the router's correction bias, beside its weight
ROLES = ("gate", "up", "down")  # an expert's matrices, in NAMES' order
