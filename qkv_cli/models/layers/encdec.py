"""Encoder-decoder layers shared by T5, BART and Marian (Vaswani et al. 2017, section 3.2.3).

    encoder:  Y = Encoder(E[source ids])                              self-attention, n x n, padding only
    decoder:  for each layer: X <- SelfAttention(X)   (m x m, causal: V_<=i)
                              X <- CrossAttention(X, Y): Q = X W^q, K = Y W^k, V = Y W^v   (m x n)
                              X <- FFN(X)
              logits = X_L E^T (+ bias)

What differs between the families is a named option here, never a copy: the norm (RMSNorm without mean, or
LayerNorm), its place (pre-norm T5, post-norm BART / Marian), the positions (T5's relative buckets added to the
scores; BART's learned table at offset 2; Marian's sinusoids), the scale (T5: 1, the others: 1/sqrt(d_k)), the
embedding scale (sqrt(d) for Marian) and the feed-forward (T5 v1.1's gated GELU).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from qkv_cli.core.numerics import softmax_
from qkv_cli.models.layers.basic import ACTIVATIONS, Linear, layer_norm, rms_norm


def layer_mask(c, layer: int):  # qkv mask --model reads one stack's rule: an encoder-decoder has three
    from qkv_cli.errors import QkvError

    raise QkvError(
        f"{c.name} is an encoder-decoder: its masks are none (encoder), causal (decoder) and none (cross); "
        "see them with qkv run SOURCE --model M --target TEXT --attention decoder --show mask"
    )


@dataclass
class Projections:
    """One attention's W^q, W^k, W^v (d -> tau d_k, PyTorch (out, in) Linears) and W^o (tau d_k -> d)."""

    q: Linear
    k: Linear
    v: Linear
    o: Linear
    tau: int
    d_k: int

    def per_head(self) -> dict:
        """Wq, Wk, Wv (tau, d, d_k), bq, bk, bv (tau, d_k) or None, Wo (tau d_k, d), bo (d,) or None: views."""
        out = {"Wo": self.o.x_at_W, "bo": self.o.b}
        for name, lin in (("q", self.q), ("k", self.k), ("v", self.v)):
            out["W" + name] = lin.W.reshape(self.tau, self.d_k, -1).transpose(0, 2, 1)
            out["b" + name] = None if lin.b is None else lin.b.reshape(self.tau, self.d_k)
        return out


@dataclass
class Norm:
    gamma: np.ndarray
    beta: np.ndarray | None  # None: RMSNorm (T5), no mean and no shift
    eps: float

    def __call__(self, x):  # [m, d] -> [m, d]
        if self.beta is None:
            return rms_norm(x, self.gamma, self.eps)
        return layer_norm(x.copy(), self.gamma, self.beta, self.eps)


@dataclass
class FeedForward:
    """W_2 act(W_1 x) (+ biases); gated (T5 v1.1): W_2 (act(W_1 x) * (W_3 x))."""

    w1: Linear
    w2: Linear
    activation: str
    gate: Linear | None = None

    def __call__(self, x):  # [m, d] -> [m, d]
        h = ACTIVATIONS[self.activation](np.ascontiguousarray(self.w1(x)))  # (m, d) x (d, d_ff) -> (m, d_ff)
        if self.gate is not None:
            h = h * self.gate(x)
        return self.w2(np.ascontiguousarray(h))  # (m, d_ff) x (d_ff, d) -> (m, d)


@dataclass
class Layer:
    self_attn: Projections
    self_norm: Norm
    ffn: FeedForward
    ffn_norm: Norm
    cross: Projections | None = None  # decoder layers: the cross-attention over the encoder's output Y
    cross_norm: Norm | None = None


@dataclass
class Stack:
    """One side (encoder or decoder): embeddings, positions, layers, final norm."""

    layers: list[Layer]
    positions: np.ndarray | None = None  # (P, d) added to the embeddings (BART, Marian); None: relative (T5)
    position_offset: int = 0  # BART: position p reads row p + 2
    embed_norm: Norm | None = None  # BART's layernorm_embedding
    buckets: np.ndarray | None = None  # T5: (num_buckets, tau) relative position bias, shared by the layers
    layer_buckets: list | None = None  # UMT5: one such table per layer (None: `buckets` serves every layer)
    final_norm: Norm | None = None  # T5's final_layer_norm


@dataclass
class Options:
    """What a family sets: scale of Q K^T, pre- or post-norm, embedding scale, T5's buckets, the output head."""

    scale: float | None  # None: 1/sqrt(d_k); T5: 1 (no scaling)
    pre_norm: bool  # T5: x + F(Norm(x)); BART / Marian: Norm(x + F(x))
    embed_scale: float = 1.0  # Marian (and BART with scale_embedding): sqrt(d)
    num_buckets: int = 32
    max_distance: int = 128
    head_scale: float = 1.0  # T5 with tied embeddings: d^-0.5 before the head


@dataclass
class Params:
    E: np.ndarray  # (V, d) shared token embeddings
    encoder: Stack
    decoder: Stack
    head: np.ndarray  # (V, d) output head (E itself when tied)
    head_bias: np.ndarray | None  # (V,) BART / Marian final_logits_bias
    options: Options


class Attended(NamedTuple):
    """One attention sub-layer, for inspection: Q from H (X), K and V from Y (= H in self-attention)."""

    H: np.ndarray  # (m, d) queries' input X
    Y: np.ndarray  # (n, d) keys' and values' input
    Q: np.ndarray  # (tau, m, dk)
    K: np.ndarray  # (tau, n, dk)
    V: np.ndarray  # (tau, n, dk)
    bias: np.ndarray | None  # (tau, m, n) T5's relative position bias, added to the scores
    weights: np.ndarray  # (tau, m, n)
    heads: np.ndarray  # (tau, m, dk)
    output: np.ndarray  # (m, d)


def split_heads(x, tau: int, d_k: int):  # [m, tau dk] -> [tau, m, dk]
    return np.ascontiguousarray(x.reshape(x.shape[0], tau, d_k).transpose(1, 0, 2))


def attend(
    Q, K, V, scale, bias, mask
):  # [tau, m, dk], [tau, n, dk], [tau, n, dk], [tau, m, n], [m, n] -> [tau, m, dk], [tau, m, n]
    """alpha = Softmax(Q K^T * scale + bias + Mask); heads = alpha V."""
    S = Q @ K.transpose(0, 2, 1)  # (tau, m, dk) x (tau, dk, n) -> (tau, m, n)
    if scale != 1:
        S *= S.dtype.type(scale)
    if bias is not None:
        S += bias
    if mask is not None:
        S += mask
    alpha = softmax_(S)
    return alpha @ V, alpha  # (tau, m, n) x (tau, n, dk) -> (tau, m, dk)


def multi_head_attention(X, Y, w: Projections, scale, bias=None, mask=None, cache=None, kv=None, change=None,
                         edit=None):  # fmt: skip
    """Q = X W^q, K = Y W^k, V = Y W^v (self-attention: Y = X); [m, d], [n, d] -> Attended.

    cache: a models.cache.LayerCache the new keys and values are appended to (the decoder writing); kv: (K, V)
    computed once (the encoder's, for cross-attention); change: (Q, K, V) -> (Q, K, V) (an ablation); edit: the
    intervention points of activation patching (pipeline.patch.hooks), edit("qkv", (Q, K, V)) -> (Q, K, V) and
    edit("heads", (heads, alpha, V)) -> heads."""
    tau, dk = w.tau, w.d_k
    Q = split_heads(w.q(X), tau, dk)
    if kv is not None:
        K, V = kv
    else:
        K, V = split_heads(w.k(Y), tau, dk), split_heads(w.v(Y), tau, dk)
    if cache is not None:
        K, V = cache.append(K, V)
    if change is not None:
        Q, K, V = change(Q, K, V)
    if edit is not None:
        Q, K, V = edit("qkv", (Q, K, V))
    scale = 1 / math.sqrt(dk) if scale is None else scale
    heads, alpha = attend(Q, K, V, scale, bias, mask)
    if edit is not None:
        heads = edit("heads", (heads, alpha, V))
    output = w.o(heads.transpose(1, 0, 2).reshape(X.shape[0], tau * dk))  # (m, tau dk) x (tau dk, d) -> (m, d)
    return Attended(X, Y, Q, K, V, bias, alpha, heads, np.ascontiguousarray(output))


def sublayer(x, norm: Norm, pre_norm: bool, f, edit=None, point: str = ""):  # [m, d] -> [m, d], Attended or None
    """Residual connection around f, normalized before (T5) or after (BART, Marian); edit(point, y) -> y is the
    patching's intervention point on the sub-layer's output y = f(.) (per position, before the residual)."""
    y, parts = f(norm(x) if pre_norm else x)
    if edit is not None:
        y = edit(point, y)
    return (x + y, parts) if pre_norm else (norm(x + y), parts)


def relative_position_bucket(relative, bidirectional: bool, num_buckets: int, max_distance: int):  # [m, n] -> [m, n]
    """T5's bucket of each key - query distance: exact below num_buckets / 4 (/ 2 one-sided), then logarithmic up to
    max_distance; bidirectional (the encoder) gives later keys buckets of their own."""
    buckets = np.zeros(relative.shape, dtype=np.int64)
    if bidirectional:
        num_buckets //= 2
        buckets += (relative > 0) * num_buckets
        relative = np.abs(relative)
    else:
        relative = -np.minimum(relative, 0)
    exact = num_buckets // 2
    with np.errstate(divide="ignore"):  # log(0) where the distance is exact anyway
        large = np.log(relative.astype(np.float32) / np.float32(exact))  # float32, as transformers computes it
    large = large / np.float32(math.log(max_distance / exact)) * np.float32(num_buckets - exact)
    large = exact + np.where(relative < exact, 0, large).astype(np.int64)
    return buckets + np.where(relative < exact, relative, np.minimum(large, num_buckets - 1))


def position_bias(table, m: int, n: int, bidirectional: bool, o: Options, start: int = 0):  # -> [tau, m, n]
    """T5's learned bias b[bucket(t - i), j] for query i (at positions start..) and key t, per head j."""
    relative = np.arange(n)[None, :] - (np.arange(m)[:, None] + start)
    idx = relative_position_bucket(relative, bidirectional, o.num_buckets, o.max_distance)
    return np.ascontiguousarray(table[idx].transpose(2, 0, 1))  # (m, n, tau) -> (tau, m, n)


def sinusoids(n_pos: int, d: int):  # -> [n_pos, d]: Marian's table, sines in the first half, cosines in the second
    j = np.arange(d)
    angle = np.arange(n_pos)[:, None] / np.power(10000, 2 * (j // 2) / d)[None, :]
    half = d // 2 + d % 2
    out = np.empty((n_pos, d))
    out[:, :half], out[:, half:] = np.sin(angle[:, 0::2]), np.cos(angle[:, 1::2])
    return out.astype(np.float32)  # transformers fills its table from float32 values


def embed(p: Params, side: Stack, ids, start: int = 0):  # [m] -> [m, d]
    """E[ids] * embed_scale (+ positions start..start+m-1) (+ the embedding LayerNorm)."""
    x = p.E[ids] * p.E.dtype.type(p.options.embed_scale)
    if side.positions is not None:
        at = side.position_offset + start
        x = x + side.positions[at : at + len(ids)]
    return side.embed_norm(x) if side.embed_norm is not None else x
