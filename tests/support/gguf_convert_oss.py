"""gpt-oss to GGUF as llama.cpp's convert_hf_to_gguf.py does it (its GptOssModel, conversion/ package of
ggml-org/llama.cpp), beside tests/support/gguf_convert.py (whose metadata and vocabulary writers it uses).

- metadata: TextModel.set_gguf_parameters (with the expert count and the experts used per token), then the sliding
  window, the expert feed-forward length and the YaRN scaling (type, factor, original context length). llama.cpp
  writes no swiglu_alpha / swiglu_limit (it uses 1.702 and 7.0), no `truncate` (its YaRN always floors and ceils the
  correction range) and no layer types (every second layer slides, the first one included).
- tensors: `sinks` gets ".weight" (filter_tensors); the experts are transposed to (out, in); gate_up_proj's
  interleaved columns are split into ffn_gate_exps (0, 2, 4 ...) and ffn_up_exps (1, 3, 5 ...), its bias alike;
  down_proj becomes ffn_down_exps. With mxfp4, the three expert matrices are stored as MXFP4 (type 39), as a file
  converted from gpt-oss's own MXFP4 checkpoint (repack_mxfp4) or quantized by llama-quantize holds them; gguf-py's
  quants.quantize makes the blocks.
"""

from __future__ import annotations

import copy

import numpy as np
from gguf_convert import add_named, finish, text_parameters, write_vocab


def expressible(transformers, torch, model):
    """The model with what llama.cpp assumes: alpha 1.702, limit 7.0, YaRN truncated; the same weights."""
    c = copy.deepcopy(model.config)
    c.swiglu_alpha, c.swiglu_limit = 1.702, 7.0
    c.rope_parameters = dict(c.rope_parameters, truncate=True)
    out = transformers.AutoModelForCausalLM.from_config(c, attn_implementation="eager", experts_implementation="eager")
    out.load_state_dict(model.state_dict())
    return out.eval()


def expert_tensors(name: str, x):  # GptOssModel.modify_tensors: one HF expert tensor -> [(suffix, array)]
    if name.endswith("gate_up_proj"):  # [E, d, 2 d_e] -> [E, 2 d_e, d], then rows g, u split
        x = x.transpose(0, 2, 1)
        return [("ffn_gate_exps.weight", x[:, ::2]), ("ffn_up_exps.weight", x[:, 1::2])]
    if name.endswith("gate_up_proj_bias"):
        return [("ffn_gate_exps.bias", x[..., ::2]), ("ffn_up_exps.bias", x[..., 1::2])]
    if name.endswith("down_proj"):
        return [("ffn_down_exps.weight", x.transpose(0, 2, 1))]
    return [("ffn_down_exps.bias", x)]


def convert(gguf, model, path, mxfp4: bool = True) -> dict[str, np.ndarray]:
    """Write `model` to `path`; returns the expert weights as the file holds them (dequantized), by HF name."""
    h = model.config.to_dict()
    w = gguf.GGUFWriter(str(path), gguf.MODEL_ARCH_NAMES[gguf.MODEL_ARCH.GPT_OSS])
    w.add_name("tiny gpt-oss")
    text_parameters(gguf, w, h)
    w.add_expert_count(h["num_local_experts"])
    w.add_expert_used_count(h["num_experts_per_tok"])
    w.add_sliding_window(h["sliding_window"])
    w.add_expert_feed_forward_length(h["intermediate_size"])
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    write_vocab(w)
    names, stored = gguf.get_tensor_name_map(gguf.MODEL_ARCH.GPT_OSS, h["num_hidden_layers"]), {}
    for name, t in model.state_dict().items():
        x = np.ascontiguousarray(t.detach().numpy())
        if ".mlp.experts." in name:
            layer = name.split(".")[2]
            parts = []
            for suffix, y in expert_tensors(name, x):
                y = np.ascontiguousarray(y, dtype=np.float32)
                if mxfp4 and suffix.endswith(".weight"):
                    q = gguf.quants.quantize(y, gguf.GGMLQuantizationType.MXFP4)
                    w.add_tensor(f"blk.{layer}.{suffix}", q, raw_dtype=gguf.GGMLQuantizationType.MXFP4)
                    y = gguf.quants.dequantize(q, gguf.GGMLQuantizationType.MXFP4).reshape(y.shape)
                else:
                    w.add_tensor(f"blk.{layer}.{suffix}", y)
                parts.append(y)
            stored[name] = back(name, parts)
            continue
        if name.endswith("sinks"):
            name += ".weight"
        add_named(w, names, name, x)
    finish(w)
    return stored


def back(name: str, parts):  # the stored expert tensor(s) in transformers' layout again
    if name.endswith("down_proj"):
        return parts[0].transpose(0, 2, 1)
    if name.endswith("down_proj_bias"):
        return parts[0]
    g, u = parts
    if name.endswith("gate_up_proj"):
        g, u = g.transpose(0, 2, 1), u.transpose(0, 2, 1)
    out = np.empty((*g.shape[:-1], 2 * g.shape[-1]), dtype=np.float32)
    out[..., ::2], out[..., 1::2] = g, u
    return out
