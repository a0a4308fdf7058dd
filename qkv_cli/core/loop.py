"""The loop kernel: Att(q_i, K, V) = Softmax(q_i K^T * scale + Mask_i) V, one head j and one query i at a time.

A readable teaching kernel (the single-query row of the notation table) that gives the same numbers as the
others; the scores, then the weights, of query i live in row i of the output.
"""

from __future__ import annotations

import numpy as np

from qkv_cli.core.gqa import kv_head_of
from qkv_cli.core.numerics import exp_normalize_, scale_, softcap_, softmax_


def loop_kernel(Q, K, V, mask, scale, softcap=None, into=None, sinks=None):  # the signature of the reference kernel
    tau, m, _ = Q.shape
    G, n, dv = V.shape
    ones = np.ones(n, dtype=Q.dtype)
    out = np.empty((tau, m, dv), dtype=Q.dtype)
    weights = np.empty((tau, m, n), dtype=Q.dtype) if into is None else into
    with np.errstate(over="ignore", invalid="ignore"):  # overflow is caught by exp_normalize_'s check
        Qs = Q * Q.dtype.type(scale)  # the scale folded into every q_i once
        for j in range(tau):
            g = kv_head_of(j, tau, G)  # grouped-query: head j reads key/value head j // (tau / G)
            K_j, V_j = K[g], V[g]
            s_j = None if sinks is None else sinks[j]  # head j's sink logit: one more softmax column, then dropped
            for i in range(m):
                alpha = weights[j, i]  # (n,): the scores, then the weights
                np.matmul(K_j, Qs[j, i], out=alpha)  # q_i K^T * scale: (n, dk) x (dk,) -> (n,)
                softcap_(alpha, softcap)
                if mask is not None:
                    alpha += mask[i]  # + Mask_i
                if not exp_normalize_(alpha, ones, s_j):  # Softmax in place; if a sum was out of range, exactly:
                    np.matmul(K_j, Q[j, i], out=alpha)
                    softcap_(scale_(alpha, scale), softcap)  # * scale, clipped to the finite range
                    if mask is not None:
                        alpha += mask[i]
                    softmax_(alpha, s_j)
                np.matmul(alpha, V_j, out=out[j, i])  # weighted sum of the rows of V: (n,) x (n, dv) -> (dv,)
    return out, weights
