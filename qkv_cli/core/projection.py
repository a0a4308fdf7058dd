"""W_j^q, W_j^k, W_j^v (d x d/tau per head) and W^o (d x d); Q^[j] = H W_j^q; concat(heads) W^o."""

from __future__ import annotations

import numpy as np


def glorot(rng, fan_in: int, fan_out: int, shape, dtype):
    """Normal with variance 2 / (fan_in + fan_out) (Glorot / Xavier)."""
    return (rng.standard_normal(shape) * np.sqrt(2.0 / (fan_in + fan_out))).astype(dtype)


def identity_heads(d: int, tau: int, dtype):  # -> [tau, d, dk]: head j gets the j-th block of d/tau columns of I
    dk = d // tau
    return np.eye(d, dtype=dtype).reshape(d, tau, dk).transpose(1, 0, 2).copy()


def init_projections(d: int, tau: int, seed: int, kind: str = "random", dtype=np.float64, kv_heads: int | None = None):
    """Wq (tau, d, dk), Wk and Wv (G, d, dk) with G = kv_heads or tau, Wo (d, d)."""
    G = tau if kv_heads is None else kv_heads
    dk = d // tau
    if kind == "identity":
        W = identity_heads(d, tau, dtype)
        return W, W[:G].copy(), W[:G].copy(), np.eye(d, dtype=dtype)
    rng = np.random.default_rng([seed, 1])  # a stream of its own, apart from the token vectors
    Wq = glorot(rng, d, dk, (tau, d, dk), dtype)
    Wk = glorot(rng, d, dk, (G, d, dk), dtype)
    Wv = glorot(rng, d, dk, (G, d, dk), dtype)
    Wo = glorot(rng, d, d, (d, d), dtype)
    return Wq, Wk, Wv, Wo


def project(H, W):  # [m, d], [tau, d, dk] -> [tau, m, dk]
    """Q^[j] = H W_j^q for every head j at once."""
    return H @ W


def concat_heads(heads):  # [tau, m, dk] -> [m, tau * dk]
    tau, m, dk = heads.shape
    return heads.transpose(1, 0, 2).reshape(m, tau * dk)


def combine(heads, Wo):  # [tau, m, dk], [d, d] -> [m, d]
    """concat(head_1..head_tau) W^o."""
    return concat_heads(heads) @ Wo
