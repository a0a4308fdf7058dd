"""BERT-family encoders: word + position + token-type embeddings, then post-LayerNorm blocks.

x_0 = LN(E[ids] + P[0..m-1] + T[type_ids])
block l:  a = MultiHead(x) (bidirectional: no mask);  x' = LN(x + a);  x'' = LN(x' + W_2 gelu(W_1 x' + b_1) + b_2)
Checkpoint matrices are PyTorch Linear weights (out, in), used as stored (layers.Linear computes (W x^T)^T).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from qkv_cli.models.config import ModelConfig
from qkv_cli.models.layers import ACTIVATIONS, AttentionParts, AttentionWeights, Linear, layer_norm, self_attention

PREFIXES = ("bert.", "")


def tensor_shapes(c: ModelConfig) -> dict[str, tuple[int, ...]]:
    """Every checkpoint tensor the forward pass reads (without the 'bert.' prefix) -> its expected shape."""
    d, dff = c.d, c.d_ff
    shapes = {
        "embeddings.word_embeddings.weight": (c.vocab_size, d),
        "embeddings.position_embeddings.weight": (c.max_positions, d),
        "embeddings.token_type_embeddings.weight": (c.type_vocab_size, d),
        "embeddings.LayerNorm.weight": (d,),
        "embeddings.LayerNorm.bias": (d,),
    }
    for l in range(c.n_layers):
        p = f"encoder.layer.{l}."
        for proj in ("query", "key", "value"):
            shapes[p + f"attention.self.{proj}.weight"] = (d, d)
            shapes[p + f"attention.self.{proj}.bias"] = (d,)
        shapes.update(
            {
                p + "attention.output.dense.weight": (d, d),
                p + "attention.output.dense.bias": (d,),
                p + "attention.output.LayerNorm.weight": (d,),
                p + "attention.output.LayerNorm.bias": (d,),
                p + "intermediate.dense.weight": (dff, d),
                p + "intermediate.dense.bias": (dff,),
                p + "output.dense.weight": (d, dff),
                p + "output.dense.bias": (d,),
                p + "output.LayerNorm.weight": (d,),
                p + "output.LayerNorm.bias": (d,),
            }
        )
    return shapes


@dataclass
class Block:
    attn: AttentionWeights
    ln1: tuple[np.ndarray, np.ndarray]  # after attention
    ffn1: Linear  # d -> d_ff
    ffn2: Linear  # d_ff -> d
    ln2: tuple[np.ndarray, np.ndarray]  # after the feed-forward


@dataclass
class Params:
    E: np.ndarray  # (V, d) word embeddings
    P: np.ndarray  # (P, d) position embeddings
    T: np.ndarray  # (types, d) token-type embeddings
    ln_emb: tuple[np.ndarray, np.ndarray]
    blocks: list[Block]


def prepare(w: dict, c: ModelConfig, dtype) -> Params:
    """Checkpoint tensors (prefix stripped) -> Params in `dtype`; Linear weights stay (out, in), Q|K|V stacked."""

    def v(name):
        return np.ascontiguousarray(w[name], dtype=dtype)

    def dense(name):
        return Linear(v(name + ".weight"), v(name + ".bias"), out_in=True)

    blocks = []
    for l in range(c.n_layers):
        p = f"encoder.layer.{l}."
        s = p + "attention.self."
        qkv = Linear(
            W=np.concatenate([v(s + "query.weight"), v(s + "key.weight"), v(s + "value.weight")]),  # (3d, d)
            b=np.concatenate([v(s + "query.bias"), v(s + "key.bias"), v(s + "value.bias")]),
            out_in=True,
        )
        blocks.append(
            Block(
                attn=AttentionWeights(qkv=qkv, o=dense(p + "attention.output.dense"), tau=c.n_heads),
                ln1=(v(p + "attention.output.LayerNorm.weight"), v(p + "attention.output.LayerNorm.bias")),
                ffn1=dense(p + "intermediate.dense"),
                ffn2=dense(p + "output.dense"),
                ln2=(v(p + "output.LayerNorm.weight"), v(p + "output.LayerNorm.bias")),
            )
        )
    return Params(
        E=v("embeddings.word_embeddings.weight"),
        P=v("embeddings.position_embeddings.weight"),
        T=v("embeddings.token_type_embeddings.weight"),
        ln_emb=(v("embeddings.LayerNorm.weight"), v("embeddings.LayerNorm.bias")),
        blocks=blocks,
    )


def embed(params: Params, c: ModelConfig, ids, type_ids=None):  # [m] -> [m, d]
    """x_0 = LN(E[ids] + P[0..m-1] + T[type_ids]); type_ids default to 0 (one sentence)."""
    m = len(ids)
    x = params.E[ids]  # (m, d), a new array
    x += params.P[:m]
    if type_ids is None:
        x += params.T[0]
    else:
        x += params.T[type_ids]
    return layer_norm(x, *params.ln_emb, c.layer_norm_eps)


def mask(m: int, dtype):  # -> None: bidirectional, every query sees every key
    return None


def scale(c: ModelConfig, layer: int) -> float:
    return 1 / math.sqrt(c.d_k)


def block(b: Block, c: ModelConfig, x, mask, scale, kernel) -> tuple[np.ndarray, AttentionParts]:  # [m, d] -> [m, d]
    """Post-LN: x' = LN(x + MultiHead(x)); x'' = LN(x' + FFN(x'))."""
    parts = self_attention(x, b.attn, mask, scale, kernel)  # H = x: the layer's input
    h = parts.output + x
    h = layer_norm(h, *b.ln1, c.layer_norm_eps)
    f = ACTIVATIONS[c.activation](b.ffn1(h))  # (m, d) x (d, d_ff) -> (m, d_ff)
    out = b.ffn2(f)  # (m, d_ff) x (d_ff, d) -> (m, d)
    out += h
    return layer_norm(out, *b.ln2, c.layer_norm_eps), parts


def final(params: Params, c: ModelConfig, x):  # [m, d] -> [m, d]: BERT has no final LayerNorm
    return x
