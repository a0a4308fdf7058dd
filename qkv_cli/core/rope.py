"""The rotary position embedding (RoPE) formula, Hugging Face's convention: rotate halves, not interleaved pairs.

    rope(x)_p = x_p * cos(p theta) + rotate_half(x_p) * sin(p theta),    rotate_half([x1, x2]) = [-x2, x1]

for the first `rot` dimensions of each head (the rest pass through), where theta = [theta_0 .. theta_{rot/2-1}]
repeated twice: dimension k turns with dimension k + rot/2 by the angle p * theta_k. The frequencies theta_k and
their scaling (linear, dynamic, llama3, yarn) belong to the model (models/rope.py); this is the rotation itself.
"""

from __future__ import annotations

import numpy as np


def angles(inv_freq, m: int, dtype=np.float64, start: int = 0):  # [rot/2] -> [m, rot]: p * theta, twice
    """The angle of every pair at positions p = start .. start + m - 1."""
    p = np.arange(start, start + m, dtype=dtype)[:, None]
    a = p * np.asarray(inv_freq, dtype=dtype)[None, :]  # (m, 1) x (1, rot/2)
    return np.concatenate([a, a], axis=1)


def cos_sin(inv_freq, m: int, scaling: float = 1.0, dtype=np.float64, start: int = 0):  # -> cos, sin [m, rot]
    a = angles(inv_freq, m, dtype, start)
    cos, sin = np.cos(a), np.sin(a)
    if scaling != 1.0:  # YaRN scales cos and sin
        cos *= cos.dtype.type(scaling)
        sin *= sin.dtype.type(scaling)
    return cos, sin


def rotate_half(x):  # [..., rot] -> [..., rot]: [x1, x2] -> [-x2, x1]
    half = x.shape[-1] // 2
    return np.concatenate([-x[..., half:], x[..., :half]], axis=-1)


def apply(X, cos, sin):  # [h, m, dk], [m, rot], [m, rot] -> [h, m, dk]: RoPE on the first rot dims of every head
    """x * cos + rotate_half(x) * sin, written half by half into one new array: x1 cos - x2 sin, x2 cos + x1 sin
    (the same roundings: a + (-b) s is a - b s exactly), without rotate_half's copies."""
    rot, half = cos.shape[-1], cos.shape[-1] // 2
    if X.ndim > 1 and X.strides[-1] > X.strides[-2]:  # a projection's heads, (dk, m) in memory: cos, sin and the
        cos, sin = np.asfortranarray(cos), np.asfortranarray(sin)  # output laid out alike, every loop runs along rows
    out = np.empty_like(X, dtype=np.result_type(X, cos))  # X's memory layout
    x1, x2 = X[..., :half], X[..., half:rot]
    np.multiply(X[..., :rot], cos, out=out[..., :rot])  # (h, m, rot) * (m, rot)
    out[..., :half] -= x2 * sin[..., :half]
    out[..., half:rot] += x1 * sin[..., half:]
    if rot < X.shape[-1]:
        out[..., rot:] = X[..., rot:]  # partial rotary: the rest passes through
    return out
