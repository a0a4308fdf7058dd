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
    rot = cos.shape[-1]
    turned = X[..., :rot] * cos + rotate_half(X[..., :rot]) * sin  # (h, m, rot) * (m, rot)
    if rot == X.shape[-1]:
        return turned
    return np.concatenate([turned, X[..., rot:]], axis=-1)  # partial rotary: the rest passes through
