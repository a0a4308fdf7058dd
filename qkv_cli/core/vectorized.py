"""The vectorized kernel: the same numbers as ``formula.reference_kernel``, faster and in less memory.

An inspector keeps every weight, so the weights are the output; everything here avoids a second m x n array:
- the scale is folded into Q (m x d_k numbers, not m x n), in Q's dtype;
- scores are written straight into the output weights array and the softmax runs there in place
  (``numerics.exp_normalize_``: exp, row sums as one BLAS product, rows times 1 / sum; when a row sum shows
  overflow or underflow, the scores are recomputed and the exact max-subtracted ``numerics.softmax_`` runs);
- small inputs take one pass over all heads, the query heads that share a key/value head as one product; from
  BLOCKED_BYTES on, the work goes in row blocks (see :func:`plan_blocks`) that stay in cache and skip what the
  mask removes; from PARALLEL_BYTES on (only blocked work, unless the threshold is lowered, as the tests do) the
  blocks are shared out over 2 threads.
The mask is never copied. Peak memory: weights + out + Q * scale + a few row vectors.
"""

from __future__ import annotations

from itertools import pairwise
from typing import NamedTuple

import numpy as np

from qkv_cli.core import threads
from qkv_cli.core.numerics import exp_normalize_, scale_, softcap_, softmax_

BLOCK_BYTES = 2 * 1024 * 1024  # target size of one row block of scores (one head)
MAX_BLOCK_ROWS = 128  # taller blocks would skip less of a causal triangle
BLOCKED_BYTES = 1024 * 1024  # weights larger than this go in planned row blocks, smaller in one pass
PARALLEL_BYTES = 4 * 1024 * 1024  # from this size on the work is split over threads.THREADS Python threads (smaller:
# handing work to a second thread costs more than it saves on this 2-core VM, see bench/README.md)


def attend_(weights, fill, ones, Q, Qs, s, sink=None):  # in place: weights <- Softmax(scores)
    """fill(Q', post) writes Q' K^T (* post, clipped) + Mask into weights; fast try first, exact fallback.
    sink: the rows' sink logits (numerics: one more softmax column, dropped), or None."""
    fill(Qs, None)  # scale folded into Q
    if not exp_normalize_(weights, ones, sink):
        fill(Q, s)  # the scale applied after Q K^T, clipped: no overflow can turn into NaN
        softmax_(weights, sink)


class RowBlock(NamedTuple):
    """Rows i0:i1 compute key columns c0:c1 only (the mask is -inf elsewhere) and add the mask on ``adds``."""

    i0: int
    i1: int
    c0: int
    c1: int
    adds: tuple  # ((a0, a1), ...) column ranges where the mask must be added; elsewhere in c0:c1 it is 0


def _span(row):  # [n] -> (first, last) column that is not -inf, or None for an all -inf row
    allowed = np.flatnonzero(row != -np.inf)
    return (int(allowed[0]), int(allowed[-1])) if allowed.size else None


def plan_blocks(mask, m, n, rows):  # [m, n] or None -> list[RowBlock]
    """Split the m query rows into blocks of ``rows`` and find, per block, what the mask lets us skip.

    The guess comes from the first and the last row: row i may attend to columns L(i)..U(i) with
    L(i) = max(L_first, L_last - (m - 1) + i) and U(i) = min(U_last, U_first + i) -- causal, sliding window,
    bottom-right causal (n > m) and key padding all have this shape. Each block then checks the guess on the
    mask: outside c0:c1 every entry must be -inf (else the block computes all n columns), and inside the zero
    region L(i1-1)..U(i0) every entry must be 0 (else the mask is added over all of c0:c1). So the plan is exact
    for any mask; the guess only decides how much is skipped. A dense causal mask thus computes only the
    lower-triangular blocks and adds the mask on the diagonal blocks only. Cost: one read of the mask.
    """
    starts = range(0, m, rows)
    if mask is None:
        return [RowBlock(i0, min(i0 + rows, m), 0, n, ()) for i0 in starts]
    first, last = _span(mask[0]), _span(mask[m - 1])
    if first is None or last is None:  # nothing to guess from: add the mask everywhere
        return [RowBlock(i0, min(i0 + rows, m), 0, n, ((0, n),)) for i0 in starts]
    (L0, U0), (L1, U1) = first, last

    def lo(i):
        return max(L0, L1 - (m - 1) + i, 0)

    def hi(i):  # exclusive
        return min(U1, U0 + i, n - 1) + 1

    plan = []
    for i0 in starts:
        i1 = min(i0 + rows, m)
        c0, c1 = lo(i0), hi(i1 - 1)
        block = mask[i0:i1]
        if c0 >= c1 or (c0 > 0 and block[:, :c0].max() != -np.inf) or (c1 < n and block[:, c1:].max() != -np.inf):
            plan.append(RowBlock(i0, i1, 0, n, ((0, n),)))  # the guess failed: every column, mask added everywhere
            continue
        z0, z1 = max(lo(i1 - 1), c0), min(hi(i0), c1)  # columns every row of the block may see
        if z0 < z1 and not block[:, z0:z1].any():  # any() is True for a nonzero or a NaN entry
            adds = tuple((a, b) for a, b in ((c0, z0), (z1, c1)) if a < b)
        else:
            adds = ((c0, c1),)
        plan.append(RowBlock(i0, i1, c0, c1, adds))
    return plan


def block_rows(n, itemsize):  # -> rows per block: about BLOCK_BYTES of scores, a multiple of 8
    rows = BLOCK_BYTES // max(1, n * itemsize)
    return int(max(8, min(MAX_BLOCK_ROWS, rows // 8 * 8)))


def _chunks(G, r, parts):  # -> slices of the (G, r) head grid, ``parts`` of them when possible
    axis, size = (0, G) if G >= parts else (1, r)
    edges = [size * k // parts for k in range(parts + 1)]
    cuts = [slice(a, b) for a, b in pairwise(edges) if a < b]
    return [(cut, slice(None)) if axis == 0 else (slice(None), cut) for cut in cuts]


def vectorized_kernel(Q, K, V, mask, scale, softcap=None, into=None, rows=None, sinks=None):  # [tau,m,dk], [G,n,dk] ..
    """All heads at once: batched matmuls over the head axis, softmax in place inside the weights array (into,
    when given: zero-filled, so the blocks the mask skips are left as they are). rows (r0, r1): only those
    queries' weights are kept (tau, r1 - r0, n); the others are computed a block at a time in scratch arrays.
    sinks (tau,): head j's sink logit joins each of its rows' softmax as a column that is then dropped."""
    with np.errstate(over="ignore", invalid="ignore"):  # overflow is caught by exp_normalize_'s check
        if rows is None:
            return _vectorized(Q, K, V, mask, float(scale), softcap, into, sinks)
        return _vectorized_rows(Q, K, V, mask, float(scale), softcap, into, rows, sinks)


def _vectorized_rows(Q, K, V, mask, s, cap, into, rows, sinks=None):
    """The weights of queries r0..r1-1 only: small inputs in one pass (then cut), larger ones block by block,
    each block's softmax in its own scratch array, the kept rows copied out (the same numbers as _vectorized)."""
    r0, r1 = rows
    tau, m, _ = Q.shape
    G, n, dv = V.shape
    kept = into if into is not None else np.zeros((tau, r1 - r0, n), dtype=Q.dtype)
    if tau * m * n * Q.dtype.itemsize <= BLOCKED_BYTES:
        out, weights = _vectorized(Q, K, V, mask, s, cap, None, sinks)
        kept[:] = weights[:, r0:r1]
        return out, kept
    r = tau // G
    Qs = np.multiply(Q, Q.dtype.type(s), order="C")
    Kt = K.transpose(0, 2, 1)
    if V.strides[1:] != (dv * V.itemsize, V.itemsize):
        V = np.ascontiguousarray(V)
    ones = np.ones(n, dtype=Q.dtype)
    out = np.empty((tau, m, dv), dtype=Q.dtype)
    plan = plan_blocks(mask, m, n, block_rows(n, Q.dtype.itemsize))

    def work(task):  # one head j, one row block b, in a scratch array; its rows inside r0..r1 copied out
        j, b = task
        g = j // r
        W = np.empty((b.i1 - b.i0, b.c1 - b.c0), dtype=Q.dtype)

        def fill(Qx, post):  # W <- Q K^T (* post), soft-capped, + Mask on this block
            np.matmul(Qx[j, b.i0 : b.i1], Kt[g, :, b.c0 : b.c1], out=W)
            if post is not None:
                scale_(W, post)
            softcap_(W, cap)
            for a0, a1 in b.adds:
                W[:, a0 - b.c0 : a1 - b.c0] += mask[b.i0 : b.i1, a0:a1]

        attend_(W, fill, ones[: b.c1 - b.c0], Q, Qs, s, None if sinks is None else sinks[j])
        np.matmul(W, V[g, b.c0 : b.c1], out=out[j, b.i0 : b.i1])
        a, e = max(b.i0, r0), min(b.i1, r1)
        if a < e:
            kept[j, a - r0 : e - r0, b.c0 : b.c1] = W[a - b.i0 : e - b.i0]

    tasks = [(j, b) for j in range(tau) for b in plan]
    threads.run_tasks(tasks, work, tau * m * n * Q.dtype.itemsize >= PARALLEL_BYTES)
    return out, kept


def _vectorized(Q, K, V, mask, s, cap, into, sinks=None):
    tau, m, dk = Q.shape
    G, n, dv = V.shape
    r = tau // G
    # the scale folded into Q: (tau, m, dk), row-major whatever Q's layout (inf if s does not fit: the exact path)
    Qs = np.multiply(Q, Q.dtype.type(s), order="C")
    Kt = K.transpose(0, 2, 1)  # K^T: (G, dk, n), a view
    if V.strides[1:] != (dv * V.itemsize, V.itemsize):  # a projection's transposed view; a KV cache's V is fine
        V = np.ascontiguousarray(V)
    ones = np.ones(n, dtype=Q.dtype)
    out = np.empty((tau, m, dv), dtype=Q.dtype)
    size = tau * m * n * Q.dtype.itemsize
    parallel = size >= PARALLEL_BYTES

    if size <= BLOCKED_BYTES:  # one unblocked pass over all heads (threaded only if PARALLEL_BYTES is set lower)
        weights = np.empty((tau, m, n), dtype=Q.dtype) if into is None else into
        W4 = weights.reshape(G, r, m, n)  # query head j = (g, h): key/value head g, h-th head sharing it
        out4 = out.reshape(G, r, m, dv)

        def work(cut):  # the query heads of a cut sharing a key/value head are one matrix of (heads x m) rows
            g = cut[0]
            W = W4[cut]
            W3 = W.reshape(W.shape[0], -1, n)  # (g, h, m, n) -> (g, h m, n): a view (the cut keeps rows whole)

            def fill(Qx, post):  # W <- Q K^T (* post), soft-capped, + Mask
                np.matmul(Qx.reshape(G, r, m, dk)[cut].reshape(W3.shape[0], -1, dk), Kt[g], out=W3)
                if post is not None:
                    scale_(W, post)
                softcap_(W, cap)
                if mask is not None:
                    np.add(W, mask, out=W)  # (.., m, n) + (m, n)

            sink = None  # the sink logit of each of W3's rows (head-major, as W3's rows are)
            if sinks is not None:
                per_head = sinks.reshape(G, r)[cut]  # (g, h)
                sink = np.repeat(per_head, m, axis=-1)  # (g, h m)
            attend_(W3, fill, ones, Q, Qs, s, sink)
            np.matmul(W3, V[g], out=out4[cut].reshape(W3.shape[0], -1, dv))  # (g, h m, n) x (g, n, dv)

        threads.run_tasks(_chunks(G, r, threads.THREADS if parallel else 1), work, parallel)
        return out, weights

    plan = plan_blocks(mask, m, n, block_rows(n, Q.dtype.itemsize))
    skips = any(b.c0 > 0 or b.c1 < n for b in plan)
    weights = into if into is not None else (np.zeros if skips else np.empty)((tau, m, n), dtype=Q.dtype)  # 0 skipped

    def work(task):  # one head j, one row block b
        j, b = task
        g = j // r
        W = weights[j, b.i0 : b.i1, b.c0 : b.c1]  # a view: the softmax runs in the output itself

        def fill(Qx, post):  # W <- Q K^T (* post), soft-capped, + Mask on this block
            np.matmul(Qx[j, b.i0 : b.i1], Kt[g, :, b.c0 : b.c1], out=W)  # (rows, dk) x (dk, cols)
            if post is not None:
                scale_(W, post)
            softcap_(W, cap)
            for a0, a1 in b.adds:
                W[:, a0 - b.c0 : a1 - b.c0] += mask[b.i0 : b.i1, a0:a1]

        attend_(W, fill, ones[: b.c1 - b.c0], Q, Qs, s, None if sinks is None else sinks[j])
        np.matmul(W, V[g, b.c0 : b.c1], out=out[j, b.i0 : b.i1])  # (rows, cols) x (cols, dv)

    tasks = sorted(((j, b) for j in range(tau) for b in plan), key=lambda t: (t[1].i1 - t[1].i0) * (t[1].c1 - t[1].c0))
    threads.run_tasks(tasks, work, parallel)
    return out, weights
