"""Att(Q, K, V) = Softmax(Q K^T * scale + Mask) V for tau heads, with interchangeable kernels.

Every kernel has one signature, ``kernel(Q, K, V, mask, scale) -> (out, weights)``:
Q (tau, m, d_k), K (G, n, d_k), V (G, n, d_v), mask (m, n) additive or None, scale a Python float;
returns out (tau, m, d_v) and weights (tau, m, n). G = tau is ordinary multi-head attention; G < tau
(tau divisible by G) is grouped-query attention: query head j uses key/value head j // (tau // G).
"""

from __future__ import annotations

import math

import numpy as np

from qkv_cli.errors import QkvError


def softmax(x, axis=-1):  # [..., n] -> [..., n]; stable, a row with every key masked gives zeros
    """Softmax with the row max subtracted; rows that are all -inf give all zeros, never NaN."""
    x = np.where(np.isposinf(x), np.finfo(x.dtype).max, x)
    x_max = np.max(x, axis=axis, keepdims=True)
    x_max = np.where(np.isneginf(x_max), 0, x_max)
    e = np.exp(x - x_max)
    total = np.sum(e, axis=axis, keepdims=True)
    return np.divide(e, total, out=np.zeros_like(e), where=total > 0)


def vectorized_kernel(Q, K, V, mask, scale):  # [tau, m, dk], [G, n, dk], [G, n, dv], [m, n] -> [tau, m, dv], [tau, m, n]
    """All heads at once: batched matmuls over the head axis."""
    tau, m, dk = Q.shape
    G, n, _ = K.shape
    r = tau // G
    Qg = Q.reshape(G, r * m, dk)  # query heads grouped by the key/value head they share
    scores = (Qg @ K.transpose(0, 2, 1)).reshape(tau, m, n) * Q.dtype.type(scale)  # (tau, m, dk) x (G, dk, n)
    if mask is not None:
        scores += mask
    weights = softmax(scores)
    out = (weights.reshape(G, r * m, n) @ V).reshape(tau, m, V.shape[-1])  # (tau, m, n) x (G, n, dv)
    return out, weights


def loop_kernel(Q, K, V, mask, scale):  # same signature; one query at a time
    """Att(q_i, K, V) = Softmax(q_i K^T * scale + Mask_i) V, looping over heads j and queries i."""
    tau, m, _ = Q.shape
    G, n, dv = V.shape
    r = tau // G
    out = np.zeros((tau, m, dv), dtype=Q.dtype)
    weights = np.zeros((tau, m, n), dtype=Q.dtype)
    s = Q.dtype.type(scale)
    for j in range(tau):
        K_j, V_j = K[j // r], V[j // r]
        for i in range(m):
            row = (K_j @ Q[j, i]) * s  # q_i K^T: (n, dk) x (dk,) -> (n,)
            if mask is not None:
                row = row + mask[i]
            alpha = softmax(row)
            weights[j, i] = alpha
            out[j, i] = alpha @ V_j  # weighted sum of the rows of V
    return out, weights


KERNELS = {"vectorized": vectorized_kernel, "loop": loop_kernel}


def get_kernel(name: str):
    """The kernel registered under ``name``; an unknown name lists the valid ones."""
    try:
        return KERNELS[name]
    except KeyError:
        raise QkvError(f"unknown kernel {name!r}: choose one of {', '.join(KERNELS)}") from None


def resolve_scale(scale, d_k: int) -> float:
    """None or 'auto' -> 1/sqrt(d_k); 'none' -> 1; 'sqrt' -> sqrt(d_k) (the misprint); else a finite number."""
    if scale is None or scale == "auto":
        return 1.0 / math.sqrt(d_k)
    if scale == "none":
        return 1.0
    if scale == "sqrt":
        return math.sqrt(d_k)
    try:
        value = float(scale)
    except (TypeError, ValueError):
        raise QkvError(f"scale {scale!r} is not valid: use auto, none, sqrt or a finite number") from None
    if not math.isfinite(value):
        raise QkvError(f"scale {scale!r} is not finite: use auto, none, sqrt or a finite number")
    return value


def check_inputs(Q, K, V, mask):
    """Shapes and dtypes the kernels rely on; raises QkvError naming what is wrong."""
    for name, x in (("Q", Q), ("K", K), ("V", V)):
        if not isinstance(x, np.ndarray) or x.ndim != 3:
            raise QkvError(f"{name} must be a 3-D array (heads, positions, width), got {getattr(x, 'shape', type(x))}")
        if x.dtype not in (np.float32, np.float64):
            raise QkvError(f"{name} has dtype {x.dtype}: use float32 or float64")
    if not (Q.dtype == K.dtype == V.dtype):
        raise QkvError(f"Q, K, V dtypes differ ({Q.dtype}, {K.dtype}, {V.dtype})")
    tau, m, dk = Q.shape
    G, n, dk2 = K.shape
    if dk2 != dk:
        raise QkvError(f"Q has width {dk} but K has width {dk2}")
    if V.shape[:2] != (G, n):
        raise QkvError(f"V {V.shape} must have the heads and positions of K {K.shape}")
    if G < 1 or tau % G:
        raise QkvError(f"query heads ({tau}) must be divisible by key/value heads ({G})")
    if mask is not None and (not isinstance(mask, np.ndarray) or mask.shape != (m, n)):
        raise QkvError(f"mask must have shape (m, n) = ({m}, {n}), got {getattr(mask, 'shape', type(mask))}")


def attention(Q, K, V, mask=None, scale=None, kernel="vectorized"):
    """out, weights = Softmax(Q K^T * scale + mask) V.

    Q (tau, m, d_k), K (G, n, d_k), V (G, n, d_v) with G dividing tau; mask (m, n) additive (0 / -inf) or
    None; scale None means 1/sqrt(d_k). Returns out (tau, m, d_v) and weights (tau, m, n) in Q's dtype.
    """
    check_inputs(Q, K, V, mask)
    run = get_kernel(kernel)
    mask = None if mask is None else mask.astype(Q.dtype, copy=False)
    return run(Q, K, V, mask, resolve_scale(scale, Q.shape[-1]))
