"""Sliding-window attention that computes only the band: O(m * n_c) time and memory, never an m x m array.

Query i sees the n_c most recent keys V_[i-n_c+1, i] (a window implies causal). For long documents the dense
(tau, m, m) weights would be mostly zeros (20,000 tokens x 12 heads in float32: 19 GB); the band is
(tau, m, n_c) (128 keys: 123 MB).

Band layout, used by every caller and by exports:

    band[j, i, t] = weight of query i on key i - n_c + 1 + t      (head j; t = 0 .. n_c - 1)

so t = n_c - 1 is the query's own position and t = 0 the oldest key in its window. For the first n_c - 1
queries part of the window lies before position 0: those slots hold weight 0 and :func:`band_keys` flags them
with key position -1. :func:`band_to_dense` scatters a band back into (tau, m, m) for small m.
"""

from __future__ import annotations

import numpy as np

from qkv_cli.core import threads
from qkv_cli.core.kernels import check_inputs, resolve_scale
from qkv_cli.core.masks import check_window
from qkv_cli.core.numerics import scale_
from qkv_cli.core.vectorized import attend_
from qkv_cli.errors import QkvError

PARALLEL_BYTES = 256 * 1024  # a band from this size on is shared out over 2 threads (fast.py's value before it
# rose to 4 MiB; the band kernel keeps it until it is measured again)

BAND_BLOCK_ROWS = 64  # queries per block; a block computes rows x (rows + n_c - 1) scores


def band_width(m: int, window: int) -> int:
    """n_c actually used: the window, at most m (a window of m or more keys is plain causal attention)."""
    return min(check_window(window), m)


def band_keys(m: int, n_c: int):  # -> [m, n_c] int64
    """Key position of every band slot: keys[i, t] = i - n_c + 1 + t, or -1 where that is before position 0."""
    keys = np.arange(m)[:, None] - (n_c - 1) + np.arange(n_c)[None, :]
    keys[keys < 0] = -1
    return keys


def band_to_dense(band):  # [tau, m, n_c] -> [tau, m, m]
    """The dense weights (zeros off the band) -- for small m, tests and comparisons with the dense kernel."""
    tau, m, n_c = band.shape
    dense = np.zeros((tau, m, m), dtype=band.dtype)
    keys = band_keys(m, n_c)
    i, t = np.nonzero(keys >= 0)
    dense[:, i, keys[i, t]] = band[:, i, t]
    return dense


def _diagonal_strip(S, n_c):  # [rows, rows + n_c - 1] -> [rows, n_c] view: strip[r, t] = S[r, r + t]
    step_r, step_c = S.strides
    return np.lib.stride_tricks.as_strided(S, shape=(S.shape[0], n_c), strides=(step_r + step_c, step_c))


def banded_attention(Q, K, V, window, scale=None):  # [tau,m,dk], [G,m,dk], [G,m,dv] -> [tau,m,dv], [tau,m,n_c]
    """Att(Q, K, V) with the sliding-window mask, computing only the band.

    Q (tau, m, d_k), K (G, m, d_k), V (G, m, d_v) (self-attention: keys are the queries' own positions; G divides
    tau); window n_c >= 1 (n_c >= m is plain causal attention); scale None means 1/sqrt(d_k).
    Returns out (tau, m, d_v) and band (tau, m, n_c) with band[j, i, t] the weight of query i on key
    i - n_c + 1 + t (0 where that key is before position 0: see :func:`band_keys`). Equal, on the band, to the
    dense kernels' weights under the window mask.
    """
    check_inputs(Q, K, V, None)
    tau, m, dk = Q.shape
    G, n, dv = V.shape
    if n != m:
        raise QkvError(f"a sliding window needs self-attention: {m} queries but {n} keys")
    n_c = band_width(m, window)
    s = resolve_scale(scale, dk)
    r = tau // G
    rows = max(1, min(BAND_BLOCK_ROWS, m))
    width = rows + n_c - 1  # keys a block of queries can see: i0 - n_c + 1 .. i0 + rows - 1
    c = np.arange(width)[None, :]
    row = np.arange(rows)[:, None]
    band_mask = np.where((c >= row) & (c <= row + n_c - 1), 0.0, -np.inf).astype(Q.dtype)  # local band, all blocks
    with np.errstate(over="ignore", invalid="ignore"):  # overflow is caught by exp_normalize_'s check
        Qs = Q * Q.dtype.type(s)
    Kt = K.transpose(0, 2, 1)  # (G, dk, m)
    ones = np.ones(width, dtype=Q.dtype)
    out = np.empty((tau, m, dv), dtype=Q.dtype)
    band = np.empty((tau, m, n_c), dtype=Q.dtype)

    def work(task):  # head j, queries i0 .. i1 - 1
        j, i0 = task
        g = j // r
        i1 = min(i0 + rows, m)
        w = i1 - i0 + n_c - 1
        first = i0 - n_c + 1  # key position of column 0 (negative near the start)
        lead = max(0, -first)  # columns before position 0: never computed, weight 0
        S = np.empty((i1 - i0, w), dtype=Q.dtype)

        def fill(Qx, post):  # S <- q_i K^T (* post) + band mask, over the keys i0 - n_c + 1 .. i1 - 1
            S[:, :lead] = -np.inf
            np.matmul(Qx[j, i0:i1], Kt[g, :, first + lead : i1], out=S[:, lead:])
            if post is not None:
                scale_(S[:, lead:], post)
            np.add(S, band_mask[: i1 - i0, :w], out=S)

        with np.errstate(over="ignore", invalid="ignore"):
            attend_(S, fill, ones[:w], Q, Qs, s)
        np.matmul(S[:, lead:], V[g, first + lead : i1], out=out[j, i0:i1])  # (rows, keys) x (keys, dv)
        band[j, i0:i1] = _diagonal_strip(S, n_c)

    tasks = [(j, i0) for j in range(tau) for i0 in range(0, m, rows)]
    threads.run_tasks(tasks, work, parallel=band.nbytes >= PARALLEL_BYTES and threads.THREADS > 1)
    return out, band
