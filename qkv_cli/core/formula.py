"""Att(Q, K, V) = Softmax(Q K^T / sqrt(d_k) + Mask) V, line for line: the reference kernel.

This is the formula as the notation table writes it, for tau query heads at once. Every other kernel in
``kernels.KERNELS`` must give the same numbers (a contract test checks each of them against this one).

    Q        (tau, m, d_k)  queries of every head: Q^[j] = H W_j^q
    K, V     (G, n, d_k)    keys and values; G = tau, or G < tau key/value heads shared by tau / G query heads
    Mask     (m, n)         additive: 0 where query i may attend to key t, -inf where it may not
    scale    1 / sqrt(d_k) unless the caller chose another
    softcap  c: scores become tanh(S / c) * c before the mask (Gemma 2); None for everyone else
    sinks    (tau,) s_j: head j's rows are Softmax([S + Mask, s_j]) with the sink column dropped (gpt-oss), so a
             row sums to 1 minus the sink's share; None: no sink
"""

from __future__ import annotations

import numpy as np

from qkv_cli.core.gqa import kv_heads_of
from qkv_cli.core.numerics import scaled_scores, softmax_


def reference_kernel(Q, K, V, mask, scale, softcap=None, into=None, sinks=None):  # [tau,m,dk], [G,n,dk], [G,n,dv] ..
    kv = kv_heads_of(Q.shape[0], K.shape[0])  # query head j reads key/value head kv[j] = j // (tau / G)
    K, V = K[kv], V[kv]  # (tau, n, dk), (tau, n, dv)
    S = scaled_scores(Q, K, scale, softcap)  # Q K^T * scale: (tau, m, dk) x (tau, dk, n) -> (tau, m, n)
    if mask is not None:
        S += mask  # + Mask: -inf removes a key
    if sinks is None:
        weights = softmax_(S)  # alpha = Softmax(S + Mask), row by row
    else:  # one more column per row holding the head's sink logit, dropped after the softmax
        column = np.broadcast_to(sinks[:, None, None], (*S.shape[:2], 1))  # (tau, m, 1)
        weights = softmax_(np.concatenate([S, column], axis=-1))[..., :-1]  # (tau, m, n + 1) -> (tau, m, n)
    out = weights @ V  # alpha V: (tau, m, n) x (tau, n, dv) -> (tau, m, dv)
    if into is not None:  # the caller's array holds the weights
        into[...] = weights
        weights = into
    return out, weights
