"""llama.cpp's `phi3` GGUF files (Phi-3, Phi-3.5, Phi-4-mini: Phi3MiniModel in convert_hf_to_gguf.py) as Hugging
Face phi3 checkpoints.

The converter keeps the fused projections as they are: qkv_proj is attn_qkv (rows [Q | K | V]: NEOX RoPE, nothing
permuted), gate_up_proj is ffn_up (rows [W_gate | W_up], llama.cpp's SwiGLU splits it in half); a file may also
hold attn_q, attn_k and attn_v apart, read here as one qkv_proj. It writes the rotated width (rope.dimension_count:
partial rotary), original_max_position_embeddings (rope.scaling.original_context_length), sliding_window (0: none)
and LongRoPE as two F32 tensors of rot/2 factors, rope_factors_short and rope_factors_long, with its cos/sin scale
rope.scaling.attn_factor = sqrt(1 + ln(s) / ln(original)), s = context_length / original (1 when s <= 1).

qkv runs such a file as transformers runs the checkpoint: the long factors when the text (prompt and generated
tokens) is longer than original_max_position_embeddings, else the short ones (llama.cpp picks by its context size,
n_ctx > original, whatever the text), and the window on every layer (llama.cpp keeps Phi-3's window off). A stored
attn_factor equal to transformers' value in float32 is computed again in full precision; another one is used as
given.
"""

from __future__ import annotations

import math

import numpy as np

from qkv_cli.errors import QkvError
from qkv_cli.models.formats.config import MAX_WIDTH
from qkv_cli.models.formats.gguf.header import shown
from qkv_cli.models.formats.gguf.mapping import factor_values
from qkv_cli.models.formats.safetensors import Tensor

LAYER_NAMES = {"attn_qkv": "self_attn.qkv_proj", "ffn_up": "mlp.gate_up_proj"}  # blk.N.<name> -> model.layers.N.
FACTORS = {"short_factor": "rope_factors_short.weight", "long_factor": "rope_factors_long.weight"}
SPLIT = ("q_proj", "k_proj", "v_proj")  # attn_q, attn_k, attn_v apart: joined into qkv_proj
FLOAT32_EPS = 2.0**-23


def config(raw: dict, meta: dict, tensors: dict, where: str) -> None:
    """Fill raw (config.json keys) with a phi3 file's rotary width, window and LongRoPE."""
    a = "phi3."
    if raw.get("sliding_window") == 0:  # Phi3MiniModel writes 0 for no window
        del raw["sliding_window"]
    d, tau = raw.get("hidden_size"), raw.get("num_attention_heads")
    if type(d) is not int or type(tau) is not int or not 0 < tau <= d or d % tau:
        return  # decoder_config names the bad key
    d_k = d // tau  # llama.cpp's n_embd_head_k (a phi3 file has no key_length)
    rot = meta.get(a + "rope.dimension_count", d_k)
    if type(rot) is not int or not 2 <= rot <= d_k or rot % 2:
        raise QkvError(f"{where}: phi3.rope.dimension_count is {shown(rot)}: expected an even number of dimensions "
                       f"from 2 to the head width {d_k}")  # fmt: skip
    raw["partial_rotary_factor"] = 1.0 if rot == d_k else (rot + 0.5) / d_k  # int(d_k * f) is rot again
    context = raw.get("max_position_embeddings")
    original = meta.get(a + "rope.scaling.original_context_length", context)  # llama.cpp: n_ctx_train when absent
    if type(original) is not int or original < 1:
        raise QkvError(f"{where}: phi3.rope.scaling.original_context_length is {shown(original)}: expected a positive "
                       "number of tokens")  # fmt: skip
    raw["original_max_position_embeddings"] = original
    stored = meta.get(a + "rope.scaling.attn_factor")
    if stored is not None and (type(stored) not in (int, float) or not (math.isfinite(stored) and stored > 0)):
        raise QkvError(f"{where}: phi3.rope.scaling.attn_factor is {shown(stored)}: expected a positive number")
    present = [key for key, name in FACTORS.items() if name in tensors]
    if not present:
        if stored is not None and stored != 1:
            raise QkvError(f"{where}: phi3.rope.scaling.attn_factor {stored} without LongRoPE factors "
                           "(rope_factors_short, rope_factors_long) is not supported")  # fmt: skip
        if isinstance(raw.get("rope_scaling"), dict) and raw["rope_scaling"].get("rope_type") == "longrope":
            raise QkvError(f"{where}: a longrope file needs both rope_factors_short and rope_factors_long")
        return
    if len(present) == 1:
        missing = next(name for key, name in FACTORS.items() if key not in present)
        raise QkvError(f"{where}: tensor {FACTORS[present[0]]!r} needs {missing!r} too: LongRoPE has both")
    scaling = {"rope_type": "longrope", "original_max_position_embeddings": original}
    for key, name in FACTORS.items():
        scaling[key] = _factors(tensors[name], name, rot, where)
    if stored is not None and not _transformers_value(stored, context, original):
        scaling["attention_factor"] = float(stored)
    raw["rope_scaling"] = scaling


def _factors(t: Tensor, name: str, rot: int, where: str) -> list[float]:
    """A LongRoPE factor tensor's values, checked before they are read: F32 or F16 [rot/2], finite and positive."""
    half = rot // 2 if rot // 2 <= MAX_WIDTH else None
    return factor_values(t, name, half, "LongRoPE factor", where, unknown=str(rot // 2),
                         note=f" (phi3.rope.dimension_count {rot} / 2)")  # fmt: skip


def _transformers_value(stored: float, context, original: int) -> bool:
    """Whether `stored` is transformers' LongRoPE scale sqrt(1 + ln(s) / ln(original)), s = context / original
    (1 when s <= 1), as the converter computes it and GGUF keeps it (float32)."""
    if type(context) is not int or context < 1:
        return False
    s = context / original
    want = 1.0 if s <= 1 or original < 2 else math.sqrt(1 + math.log(s) / math.log(original))
    return abs(stored - want) <= 2 * FLOAT32_EPS * want


def tensors(out: dict[str, Tensor], gguf: dict[str, Tensor], raw: dict) -> dict[str, Tensor]:
    """out (the generic names) with a layer's separate q_proj, k_proj and v_proj joined into qkv_proj."""
    for layer in range(raw.get("num_hidden_layers") or 0):
        p = f"model.layers.{layer}.self_attn."
        parts = [out.get(f"{p}{x}.weight") for x in SPLIT]
        if all(t is None for t in parts):
            continue
        if any(t is None for t in parts) or f"{p}qkv_proj.weight" in out:
            raise QkvError(f"GGUF layer {layer} has some of attn_q, attn_k, attn_v and attn_qkv: expected attn_qkv "
                           "alone or attn_q, attn_k and attn_v together")  # fmt: skip
        if any(len(t.shape) != 2 or t.shape[1] != parts[0].shape[1] for t in parts):
            raise QkvError(f"GGUF layer {layer}: attn_q {list(parts[0].shape)}, attn_k {list(parts[1].shape)} and "
                           f"attn_v {list(parts[2].shape)} must be matrices of the same width")  # fmt: skip
        rows = sum(t.shape[0] for t in parts)
        out[f"{p}qkv_proj.weight"] = Tensor((rows, parts[0].shape[1]), parts[0].kind, _joined(parts), parts[0].source)
        for x in SPLIT:
            del out[f"{p}{x}.weight"]
    return out


def _joined(parts: list[Tensor]):  # -> [tau d_k + 2 G d_k, d]: rows [Q | K | V], qkv_proj's layout
    return lambda: np.concatenate([t.read() for t in parts], axis=0)
