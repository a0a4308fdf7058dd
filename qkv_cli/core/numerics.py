"""Softmax and score scaling, written once for every kernel and every view that recomputes weights.

Softmax(x)_t = exp(x_t - max x) / sum_t' exp(x_t' - max x): subtracting the row max keeps exp from overflowing.
A row whose every entry is -inf (every key masked) gives zeros, never NaN (PyTorch issue #41508).

Attention sinks (gpt-oss): a learned logit s_j per head joins every row of head j as one more column,
Softmax([x, s_j]), and that column is dropped, so the row sums to 1 - exp(s_j) / (sum_t exp(x_t) + exp(s_j)):
the missing mass is the sink's share. ``sink`` (the row sums' shape, x.shape[:-1], or broadcastable to it) adds
that column without building it; None leaves it out.
"""

from __future__ import annotations

import numpy as np

# exp_normalize_ accepts a row when its sum of exp(scores) lies in [low, high]
_SAFE_TOTALS = {np.dtype(np.float32): (2.0**-60, 2.0**120), np.dtype(np.float64): (2.0**-900, 2.0**900)}


def softmax_(x, sink=None):  # [..., n], [...] or None -> the same array, overwritten with its softmax
    """Stable softmax in place; +inf saturates at the largest finite value, an all -inf row becomes zeros.
    sink: finite logits of a dropped extra column per row (see the module docstring)."""
    info = np.finfo(x.dtype)
    np.minimum(x, info.max, out=x)  # +inf - +inf would be NaN
    x_max = x.max(axis=-1, keepdims=True)
    if sink is not None:
        sink = np.asarray(sink, dtype=x.dtype)[..., None]  # (..., 1): the extra column
        np.maximum(x_max, sink, out=x_max)  # the max over [x, sink]
    np.maximum(x_max, -info.max, out=x_max)  # all -inf row: keep the max finite so -inf - max stays -inf
    with np.errstate(over="ignore"):  # -max - max overflows to -inf, and exp(-inf) = 0 is right
        x -= x_max
    np.exp(x, out=x)
    total = x.sum(axis=-1, keepdims=True)
    if sink is not None:
        total += np.exp(sink - x_max)  # the sink column's exp, in the sum and then dropped
    np.maximum(total, info.tiny, out=total)  # all -inf row: 0 * (1 / tiny) = 0, never 0 / 0
    np.reciprocal(total, out=total)
    x *= total
    return x


def softmax(x, dtype=None):  # [..., n] -> [..., n], a new array
    """Softmax over the last axis of a copy of x (float64 unless x is float32 or dtype says otherwise)."""
    x = np.asarray(x)
    if dtype is None:
        dtype = x.dtype if x.dtype in (np.float32, np.float64) else np.float64
    with np.errstate(over="ignore", invalid="ignore"):
        return softmax_(np.array(x, dtype=dtype, copy=True))


def exp_normalize_(x, ones, sink=None, out=None):  # [..., n], [n], [...] -> True and x = Softmax(x); False (garbage)
    """Softmax without the row-max pass: exp in place, row sums as one BLAS product x @ 1, then x *= 1 / sum.

    Subtracting the max only protects exp from overflow and underflow, and the row sums reveal both: a sum in
    [2^-60, 2^120] (float32; [2^-900, 2^900] for float64) means no exp overflowed and the row max is above
    -60 ln 2 - ln n, so any weight that exp pushed into subnormals is below 1e-27 in absolute terms. The
    result then equals the max-subtracted softmax to rounding (it even skips the rounding of x - max).
    Otherwise (huge or +inf scores, a row with every key masked, all scores far below 0) this returns False
    and the caller recomputes the scores and uses the exact :func:`softmax_`. sink: as for softmax_ (its exp
    joins the sums, which the same range check covers). out: an array of x's shape that receives the softmax
    (x then holds exp(x)); None: x itself.
    """
    out = x if out is None else out
    np.exp(x, out=x)
    total = np.matmul(x, ones)  # (..., n) x (n,) -> (...): the row sums, by BLAS
    if sink is not None:
        with np.errstate(over="ignore"):  # an overflowing exp(sink) fails the range check below
            total = total + np.exp(np.asarray(sink, dtype=x.dtype))
    low, high = _SAFE_TOTALS[x.dtype]
    if x.ndim == 1:  # one row (the loop kernel): Python scalars are cheaper
        t = float(total)
        if not low <= t <= high:
            return False
        np.multiply(x, x.dtype.type(1.0 / t), out=out)
        return True
    if not (total.min() >= low and total.max() <= high):  # NaN fails as well
        return False
    np.reciprocal(total, out=total)
    np.multiply(x, total[..., None], out=out)
    return True


def scale_(scores, scale):  # [..., n] -> the same array: scores * scale, clipped to the finite range
    """scores *= scale, saturated at the dtype's largest finite value (so -inf can only come from the mask).

    The product is taken in float64 (a scale such as 1e300 does not fit in float32), then rounded to the scores'
    dtype: 0 * scale stays 0, anything too large becomes the largest finite value.
    """
    with np.errstate(over="ignore"):
        np.multiply(scores, np.float64(scale), out=scores, casting="same_kind")
    big = np.finfo(scores.dtype).max
    np.clip(scores, -big, big, out=scores)
    return scores


def softcap_(scores, cap):  # [..., n] -> the same array: tanh(scores / cap) * cap (Gemma 2's logit soft-capping)
    """Squash the scores into (-cap, cap) before the mask; None or 0 leaves them alone."""
    if cap:
        scores *= scores.dtype.type(1.0 / cap)
        np.tanh(scores, out=scores)
        scores *= scores.dtype.type(cap)
    return scores


def scaled_scores(Q, K, scale, softcap=None):  # [.., m, dk], [.., n, dk] -> [.., m, n]
    """S = Q K^T * scale (then soft-capped if the model does), before the mask: what tables call the scores."""
    with np.errstate(over="ignore", invalid="ignore"):  # inf from huge inputs saturates in scale_
        S = Q @ np.swapaxes(K, -1, -2)  # (.., m, dk) x (.., dk, n) -> (.., m, n)
    return softcap_(scale_(S, scale), softcap)
