"""Additive masks for Softmax(Q K^T / sqrt(d_k) + Mask): 0 where query i may attend to key j, -inf where not.

Query positions are i = 0..m-1, key positions j = 0..n-1 (n = m in self-attention).
"""

from __future__ import annotations

import numpy as np

from qkv_cli.errors import QkvError


def allowed_to_additive(allowed, dtype=np.float64):  # [m, n] bool -> [m, n] 0 / -inf
    """True = may attend -> 0; False -> -inf."""
    mask = np.zeros(allowed.shape, dtype=dtype)
    mask[~allowed] = -np.inf
    return mask


def causal_allowed(m: int, n: int | None = None):  # -> [m, n] bool
    """V_<=i: query i sees keys 0..i."""
    n = m if n is None else n
    return np.tril(np.ones((m, n), dtype=bool))


def window_allowed(m: int, n_c: int):  # -> [m, m] bool
    """V_[i-n_c+1, i]: query i sees the n_c most recent keys i-n_c+1..i (a window implies causal)."""
    if n_c < 1:
        raise QkvError(f"window ({n_c}) must be at least 1: query i sees keys i-n_c+1..i")
    i = np.arange(m)[:, None]
    j = np.arange(m)[None, :]
    return (j <= i) & (j > i - min(n_c, m))  # n_c >= m is plain causal (and a huge n_c must not overflow int64)


def build_mask(
    m: int, n: int | None = None, causal: bool = False, window: int | None = None, dtype=np.float64
):  # -> [m, n] additive, or None when every query sees every key
    """The additive Mask for the chosen options; None means no masking at all."""
    n = m if n is None else n
    if window is not None:
        if n != m:
            raise QkvError("--window needs self-attention (keys are the queries' own tokens)")
        return allowed_to_additive(window_allowed(m, window), dtype)
    if causal:
        return allowed_to_additive(causal_allowed(m, n), dtype)
    return None
