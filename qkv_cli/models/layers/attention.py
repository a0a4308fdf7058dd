"""The attention sub-layer every family shares, with hooks for what families add.

    Q^[j] = H W_j^q + b_j^q   (tau heads)        K^[g], V^[g] = H W_g^{k,v} + b_g^{k,v}   (G key/value heads)
    [QK-norm]  [rotate Q and K (RoPE)]  [after RoPE: Llama 4's L2 norm or query temperature]
    heads = Softmax(Q K^T * scale [soft-capped] + Mask [, sink s_j]) V
    output = concat(head_1..head_tau) W^o + b^o

Query head j reads key/value head j // (tau / G) (grouped-query attention; G = tau without it). The three
projections are kept fused as one Linear [W^q | W^k | W^v], head-major inside each block, so one matrix
product gives every head.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from qkv_cli.core.kernels import attention
from qkv_cli.models.layers.basic import Linear


@dataclass
class AttentionWeights:
    """One layer's attention parameters: qkv maps d -> (tau + 2 G) d_k, o maps tau d_k -> d."""

    qkv: Linear
    o: Linear
    tau: int
    G: int
    d_k: int

    def per_head(self) -> dict:
        """Wq (tau, d, d_k), Wk and Wv (G, d, d_k), bq (tau, d_k), bk and bv (G, d_k) (None without biases),
        Wo (tau d_k, d), bo (d,) or None: H Wq[j] + bq[j] = Q^[j]. Views of the checkpoint's arrays."""
        tau, G, dk = self.tau, self.G, self.d_k
        W = self.qkv.W
        if self.qkv.out_in:  # (rows, d) -> (tau + 2G, dk, d) -> (tau + 2G, d, dk)
            W = W.reshape(tau + 2 * G, dk, -1).transpose(0, 2, 1)
        else:  # (d, rows) -> (d, tau + 2G, dk) -> (tau + 2G, d, dk)
            W = W.reshape(W.shape[0], tau + 2 * G, dk).transpose(1, 0, 2)
        b = None if self.qkv.b is None else self.qkv.b.reshape(tau + 2 * G, dk)
        out = {"Wq": W[:tau], "Wk": W[tau : tau + G], "Wv": W[tau + G :], "Wo": self.o.x_at_W, "bo": self.o.b}
        for name, rows in (("bq", slice(0, tau)), ("bk", slice(tau, tau + G)), ("bv", slice(tau + G, None))):
            out[name] = None if b is None else b[rows]
        return out


class Hooks(NamedTuple):
    """What a family adds to the formula; None leaves a step out."""

    scale: float  # multiplies Q K^T
    qk_norm: Callable | None = None  # (Q, K) (tau, m, dk), (G, m, dk) -> normalized (QK-norm, before RoPE)
    qk_norm_flat: Callable | None = None  # (q, k) (m, tau dk), (m, G dk) -> normalized, before splitting heads
    rotate: Callable | None = None  # (X) (h, m, dk) -> X with RoPE applied at positions 0..m-1
    softcap: float | None = None  # tanh(S / c) * c before the mask
    values: Callable | None = None  # (V) (G, n, dk) -> V changed (value zeroing: one key's row set to 0)
    sinks: np.ndarray | None = None  # (tau,) a sink logit per head: Softmax([scores, s_j]), the sink dropped (gpt-oss)
    after_rope: Callable | None = None  # (Q, K) -> (Q, K) after RoPE (Llama 4: L2 norm, the NoPE query temperature)
    edit: Callable | None = None  # (point, value) -> value: reads or replaces "qkv" and "heads" (pipeline.patch)


def l2_norm_qk(Q, K, eps):  # [tau, m, dk], [G, m, dk] -> the same: x / sqrt(mean(x^2) + eps) over d_k, no weight
    return tuple(X * (X.dtype.type(1) / np.sqrt(np.mean(X * X, axis=-1, keepdims=True) + X.dtype.type(eps)))
                 for X in (Q, K))  # fmt: skip


def query_temperature(m, start, floor_scale, attn_scale, dtype):  # -> [m]: one factor per query position p
    """log(floor((p + 1) / floor_scale) + 1) attn_scale + 1 (Llama 4's NoPE layers, arXiv 2501.19399): 1 within
    the first floor_scale positions, growing with the log of the position beyond."""
    t = np.dtype(dtype).type
    p = np.arange(start, start + m, dtype=dtype)
    return np.log1p(np.floor((p + t(1)) / t(floor_scale))) * t(attn_scale) + t(1)


def tempered_queries(m, start, floor_scale, attn_scale, dtype) -> Callable:  # -> (Q, K) -> (Q tempered, K)
    """The queries at positions start..start+m-1 times their query_temperature; the keys as they are."""
    scales = query_temperature(m, start, floor_scale, attn_scale, dtype)
    return lambda Q, K: (Q * scales[None, :, None], K)  # (tau, m, dk) * (1, m, 1)


class Attended(NamedTuple):
    """What one attention sub-layer computed, for inspection."""

    H: np.ndarray  # (m, d) the sub-layer's input
    Q: np.ndarray  # (tau, m, dk): what the scores use (after QK-norm and RoPE)
    K: np.ndarray  # (G, m, dk)
    V: np.ndarray  # (G, m, dk)
    Q_pre_rope: np.ndarray | None  # before the rotation (None without RoPE)
    K_pre_rope: np.ndarray | None
    weights: np.ndarray  # (tau, m, m)
    heads: np.ndarray  # (tau, m, dk)
    output: np.ndarray  # (m, d) = concat(heads) W^o + b^o
    routing: object = None  # a MoE layer's models.layers.moe.Routing (top [m, k], weights [m, k]), set by the block


def project(H, w: AttentionWeights, hooks: Hooks):  # [m, d] -> Q [tau, m, dk], K [G, m, dk], V [G, m, dk]
    """Q, K, V of every head from one product with the fused [W^q | W^k | W^v]."""
    m = H.shape[0]
    tau, G, dk = w.tau, w.G, w.d_k
    if w.qkv.out_in:
        rows = w.qkv(H).T  # (tau + 2G) dk rows, one column per token: (rows, m), a view of (W H^T)
        if hooks.qk_norm_flat is not None:
            q, k = hooks.qk_norm_flat(rows[: tau * dk].T, rows[tau * dk : (tau + G) * dk].T)
            rows = np.concatenate([q.T, k.T, rows[(tau + G) * dk :]])
        heads = rows.reshape(tau + 2 * G, dk, m).transpose(0, 2, 1)  # (tau + 2G, m, dk), views
    else:
        y = w.qkv(H)  # (m, d) x (d, rows) -> (m, rows)
        if hooks.qk_norm_flat is not None:
            q, k = hooks.qk_norm_flat(y[:, : tau * dk], y[:, tau * dk : (tau + G) * dk])
            y = np.concatenate([q, k, y[:, (tau + G) * dk :]], axis=1)
        heads = y.reshape(m, tau + 2 * G, dk).transpose(1, 0, 2)  # (tau + 2G, m, dk), views
    return heads[:tau], heads[tau : tau + G], heads[tau + G :]


def self_attention(H, w: AttentionWeights, hooks: Hooks, mask, kernel, cache=None, into=None, rows=None) -> Attended:
    """Multi-head self-attention of one layer with the family's hooks; see the module docstring.

    cache: a models.cache.LayerCache holding the keys and values of earlier tokens: the m new tokens' K and V are
    appended to it and their queries attend over every cached key (mask: m x all keys). into: a zero-filled
    (tau, m, n) array the weights are written to (the model's slot for this layer). rows (r0, r1): keep only those
    queries' weights (tau, r1 - r0, n); the output is every query's."""
    m = H.shape[0]
    Q, K, V = project(H, w, hooks)
    if hooks.qk_norm is not None:
        Q, K = hooks.qk_norm(Q, K)
    Q_pre = K_pre = None
    if hooks.rotate is not None:
        Q_pre, K_pre = Q, K
        Q, K = hooks.rotate(Q), hooks.rotate(K)
    if hooks.after_rope is not None:
        Q, K = hooks.after_rope(Q, K)
    if cache is not None:
        K, V = cache.append(K, V)  # (G, cached + m, dk): the keys and values every new query may see
    if hooks.values is not None:
        V = hooks.values(V)
    if hooks.edit is not None:  # activation patching: the Q, K, V the scores and the output use
        Q, K, V = hooks.edit("qkv", (Q, K, V))
    heads, weights = attention(Q, K, V, mask=mask, scale=hooks.scale, kernel=kernel, softcap=hooks.softcap, into=into,
                               rows=rows, sinks=hooks.sinks)  # fmt: skip
    if hooks.edit is not None:  # each head's output z (tau, m, dk), given its weights and V: a pattern or z patched
        heads = hooks.edit("heads", (heads, weights, V))
    concat = heads.transpose(1, 0, 2).reshape(m, w.tau * w.d_k)  # (tau, m, dk) -> (m, tau dk)
    output = w.o(concat)  # concat(heads) W^o + b^o: (m, tau dk) x (tau dk, d) -> (m, d)
    return Attended(H, Q, K, V, Q_pre, K_pre, weights, heads, output)


def sink_share(weights):  # [..., m, n] -> [..., m]: 1 - sum_t alpha_it, what the sink column took (gpt-oss)
    return (1 - weights.sum(axis=-1, dtype=np.float64)).astype(weights.dtype)
