"""GPT-2-family decoders: token + position embeddings, pre-LayerNorm blocks, causal attention, final LN.

x_0 = E[ids] + P[0..m-1]
block l:  H = LN_1(x);  x' = x + MultiHead(H) (causal Mask);  x'' = x' + W_2 gelu_new(W_1 LN_2(x') + b_1) + b_2
last:     LN_f(x_L)
Checkpoint matrices are Conv1D weights, already stored (in, out) = x @ W form; c_attn holds [W^q | W^k | W^v].
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from qkv_cli.masks import build_mask
from qkv_cli.models.config import ModelConfig
from qkv_cli.models.layers import ACTIVATIONS, AttentionParts, AttentionWeights, Linear, layer_norm, self_attention

PREFIXES = ("transformer.", "")


def tensor_shapes(c: ModelConfig) -> dict[str, tuple[int, ...]]:
    """Every checkpoint tensor the forward pass reads (without the 'transformer.' prefix) -> its expected shape."""
    d, dff = c.d, c.d_ff
    shapes = {"wte.weight": (c.vocab_size, d), "wpe.weight": (c.max_positions, d)}
    for l in range(c.n_layers):
        p = f"h.{l}."
        shapes.update(
            {
                p + "ln_1.weight": (d,),
                p + "ln_1.bias": (d,),
                p + "attn.c_attn.weight": (d, 3 * d),
                p + "attn.c_attn.bias": (3 * d,),
                p + "attn.c_proj.weight": (d, d),
                p + "attn.c_proj.bias": (d,),
                p + "ln_2.weight": (d,),
                p + "ln_2.bias": (d,),
                p + "mlp.c_fc.weight": (d, dff),
                p + "mlp.c_fc.bias": (dff,),
                p + "mlp.c_proj.weight": (dff, d),
                p + "mlp.c_proj.bias": (d,),
            }
        )
    shapes.update({"ln_f.weight": (d,), "ln_f.bias": (d,)})
    return shapes


@dataclass
class Block:
    ln1: tuple[np.ndarray, np.ndarray]  # before attention
    attn: AttentionWeights
    ln2: tuple[np.ndarray, np.ndarray]  # before the feed-forward
    ffn1: Linear  # c_fc: d -> d_ff
    ffn2: Linear  # c_proj: d_ff -> d


@dataclass
class Params:
    E: np.ndarray  # (V, d) wte
    P: np.ndarray  # (P, d) wpe
    blocks: list[Block]
    ln_f: tuple[np.ndarray, np.ndarray]


def prepare(w: dict, c: ModelConfig, dtype) -> Params:
    """Checkpoint tensors (prefix stripped) -> Params in `dtype` (Conv1D weights are already x @ W)."""

    def v(name):
        return np.ascontiguousarray(w[name], dtype=dtype)

    def conv1d(name):
        return Linear(v(name + ".weight"), v(name + ".bias"), out_in=False)

    blocks = []
    for l in range(c.n_layers):
        p = f"h.{l}."
        blocks.append(
            Block(
                ln1=(v(p + "ln_1.weight"), v(p + "ln_1.bias")),
                attn=AttentionWeights(qkv=conv1d(p + "attn.c_attn"), o=conv1d(p + "attn.c_proj"), tau=c.n_heads),
                ln2=(v(p + "ln_2.weight"), v(p + "ln_2.bias")),
                ffn1=conv1d(p + "mlp.c_fc"),
                ffn2=conv1d(p + "mlp.c_proj"),
            )
        )
    return Params(E=v("wte.weight"), P=v("wpe.weight"), blocks=blocks, ln_f=(v("ln_f.weight"), v("ln_f.bias")))


def embed(params: Params, c: ModelConfig, ids, type_ids=None):  # [m] -> [m, d]
    """x_0 = E[ids] + P[0..m-1] (GPT-2 has no token types and no embedding LayerNorm)."""
    x = params.E[ids]  # (m, d), a new array
    x += params.P[: len(ids)]
    return x


def mask(m: int, dtype):  # -> [m, m] causal: query i sees keys 0..i
    return build_mask(m, causal=True, dtype=dtype)


def scale(c: ModelConfig, layer: int) -> float:
    s = 1 / math.sqrt(c.d_k) if c.scale_attn_weights else 1.0
    return s / (layer + 1) if c.scale_by_layer else s


def block(b: Block, c: ModelConfig, x, mask, scale, kernel) -> tuple[np.ndarray, AttentionParts]:  # [m, d] -> [m, d]
    """Pre-LN: x' = x + MultiHead(LN_1(x)); x'' = x' + FFN(LN_2(x'))."""
    H = layer_norm(x, *b.ln1, c.layer_norm_eps)  # the attention's input
    parts = self_attention(H, b.attn, mask, scale, kernel)
    x = parts.output + x
    h = layer_norm(x, *b.ln2, c.layer_norm_eps)
    f = ACTIVATIONS[c.activation](b.ffn1(h))  # (m, d) x (d, d_ff) -> (m, d_ff)
    out = b.ffn2(f)  # (m, d_ff) x (d_ff, d) -> (m, d)
    out += x
    return out, parts


def final(params: Params, c: ModelConfig, x):  # [m, d] -> [m, d]: LN_f
    return layer_norm(x, *params.ln_f, c.layer_norm_eps)
