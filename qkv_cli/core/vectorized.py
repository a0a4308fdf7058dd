"""The vectorized kernel: the same numbers as ``formula.reference_kernel``, faster and in less memory.

An inspector keeps every weight, so the weights are the output; everything here avoids a second m x n array:
- the scale is folded into K^T, copied once in row-major order (G x d_k x n numbers, not m x n; BLAS reads
  Q K^T fastest that way), in Q's dtype;
- scores are written straight into the output weights array and the softmax runs there in place
  (``numerics.exp_normalize_``: exp, row sums as one BLAS product, rows times 1 / sum; when a row sum shows
  overflow or underflow, the scores are recomputed and the exact max-subtracted ``numerics.softmax_`` runs);
- small inputs take one pass over all heads, the query heads that share a key/value head as one product; from
  BLOCKED_BYTES on, the work goes in row blocks (see :func:`plan_blocks`) that stay in cache and skip what the
  mask removes; a block narrower than n is computed in its thread's row-major scratch block and its last softmax
  step writes the weights; from PARALLEL_BYTES on (only blocked work, unless the threshold is lowered, as the
  tests do) the blocks are shared out over 2 threads, BLAS held to one thread throughout.
The mask is never copied. Peak memory: weights + out + K^T * scale + one block per thread + a few row vectors.
"""

from __future__ import annotations

import threading
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
ONE_BLAS_BYTES = 256 * 1024  # from this size on BLAS is held to one thread on the calling thread too: its threads
# spin between the small products, which on a shared machine costs many times the products (bench/README.md)


def attend_(weights, fill, ones, Q, Qs, s, sink=None, out=None):  # in place: weights <- Softmax(scores)
    """fill(X, post) writes the scores (+ Mask) into weights: fill(Qs, None) with the scale folded in (fast try
    first), fill(Q, s) with the scale applied after the product, clipped (the exact fallback). Q and Qs are only
    handed back to fill (the kernels pass K^T and K^T * scale). sink: the rows' sink logits (numerics: one more
    softmax column, dropped), or None. out: where the softmax goes (the weights' block), if not into weights."""
    fill(Qs, None)  # scale folded in
    if not exp_normalize_(weights, ones, sink, out=out):
        fill(Q, s)  # the scale applied after Q K^T, clipped: no overflow can turn into NaN
        softmax_(weights, sink)
        if out is not None:
            out[...] = weights


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
        if Q.strides[-1] != Q.itemsize:  # BLAS reads rows of unit stride; a projection's view has them
            Q = np.ascontiguousarray(Q)
        if V.strides[-1] != V.itemsize:
            V = np.ascontiguousarray(V)
        Kt = K.transpose(0, 2, 1)  # K^T: (G, dk, n), a view
        # the scale folded into K^T, row-major (BLAS's fast layout for Q K^T); inf if s does not fit: the exact path
        Kts = np.multiply(Kt, K.dtype.type(scale), order="C")
        if rows is None:
            return _vectorized(Q, Kt, Kts, V, mask, float(scale), softcap, into, sinks)
        return _vectorized_rows(Q, Kt, Kts, V, mask, float(scale), softcap, into, rows, sinks)


def _block_work(Q, Kt, Kts, V, mask, s, cap, sinks, out, plan, weights, keep=None):  # -> work((j, b))
    """The work of head j on row block b: scores, softmax, alpha V into out[j, b.i0:b.i1].

    The scores are computed in a row-major block: the weights' own block weights[j, i0:i1, c0:c1] when it spans
    all n columns, else this thread's scratch (NumPy's element-wise steps are about 4x slower on a strided block),
    and the softmax's last step (rows times 1 / sum) writes the weights' block. weights None: the softmax stays in
    the scratch block and keep(j, b, alpha) copies out what the caller keeps."""
    r = Q.shape[0] // Kt.shape[0]
    ones = np.ones(Kt.shape[-1], dtype=Q.dtype)
    size = max((b.i1 - b.i0) * (b.c1 - b.c0) for b in plan)
    scratch = {}  # thread id -> that thread's flat scratch block, reused by all its tasks

    def work(task):
        j, b = task
        g = j // r
        rows, cols = b.i1 - b.i0, b.c1 - b.c0
        W = None if weights is None else weights[j, b.i0 : b.i1, b.c0 : b.c1]  # a view into the weights
        if W is not None and W.flags.c_contiguous:
            S = W
        else:
            buf = scratch.get(threading.get_ident())
            if buf is None:
                buf = scratch[threading.get_ident()] = np.empty(size, dtype=Q.dtype)
            S = buf[: rows * cols].reshape(rows, cols)

        def fill(Kx, post):  # S <- Q K^T (* post), soft-capped, + Mask on this block
            np.matmul(Q[j, b.i0 : b.i1], Kx[g, :, b.c0 : b.c1], out=S)  # (rows, dk) x (dk, cols)
            if post is not None:
                scale_(S, post)
            softcap_(S, cap)
            for a0, a1 in b.adds:
                S[:, a0 - b.c0 : a1 - b.c0] += mask[b.i0 : b.i1, a0:a1]

        sink = None if sinks is None else sinks[j]
        attend_(S, fill, ones[:cols], Kt, Kts, s, sink, out=None if W is None or W is S else W)
        alpha = S if W is None else W
        np.matmul(alpha, V[g, b.c0 : b.c1], out=out[j, b.i0 : b.i1])  # (rows, cols) x (cols, dv)
        if keep is not None:
            keep(j, b, alpha)

    return work


def _by_cost(tau, plan):  # -> every (head, row block) task, cheapest first (threads.run_tasks takes from the end)
    return sorted(((j, b) for j in range(tau) for b in plan), key=lambda t: (t[1].i1 - t[1].i0) * (t[1].c1 - t[1].c0))


def _vectorized_rows(Q, Kt, Kts, V, mask, s, cap, into, rows, sinks=None):
    """The weights of queries r0..r1-1 only: small inputs in one pass (then cut), larger ones block by block,
    each block's softmax in its thread's scratch block, the kept rows copied out (the same numbers as _vectorized)."""
    r0, r1 = rows
    tau, m, _ = Q.shape
    G, n, dv = V.shape
    kept = into if into is not None else np.zeros((tau, r1 - r0, n), dtype=Q.dtype)
    if tau * m * n * Q.dtype.itemsize <= BLOCKED_BYTES:
        out, weights = _vectorized(Q, Kt, Kts, V, mask, s, cap, None, sinks)
        kept[:] = weights[:, r0:r1]
        return out, kept
    out = np.empty((tau, m, dv), dtype=Q.dtype)
    plan = plan_blocks(mask, m, n, block_rows(n, Q.dtype.itemsize))

    def keep(j, b, alpha):  # block b's rows inside r0..r1, copied out
        a, e = max(b.i0, r0), min(b.i1, r1)
        if a < e:
            kept[j, a - r0 : e - r0, b.c0 : b.c1] = alpha[a - b.i0 : e - b.i0]

    work = _block_work(Q, Kt, Kts, V, mask, s, cap, sinks, out, plan, None, keep)
    threads.run_tasks(_by_cost(tau, plan), work, tau * m * n * Q.dtype.itemsize >= PARALLEL_BYTES, one_blas=True)
    return out, kept


def _vectorized(Q, Kt, Kts, V, mask, s, cap, into, sinks=None):
    tau, m, dk = Q.shape
    G, n, dv = V.shape
    r = tau // G
    out = np.empty((tau, m, dv), dtype=Q.dtype)
    size = tau * m * n * Q.dtype.itemsize
    parallel = size >= PARALLEL_BYTES

    if size <= BLOCKED_BYTES:  # one unblocked pass over all heads (threaded only if PARALLEL_BYTES is set lower)
        ones = np.ones(n, dtype=Q.dtype)
        weights = np.empty((tau, m, n), dtype=Q.dtype) if into is None else into
        W4 = weights.reshape(G, r, m, n)  # query head j = (g, h): key/value head g, h-th head sharing it
        out4 = out.reshape(G, r, m, dv)
        Q4 = np.ascontiguousarray(Q).reshape(G, r, m, dk)

        def work(cut):  # the query heads of a cut sharing a key/value head are one matrix of (heads x m) rows
            g = cut[0]
            W = W4[cut]
            W3 = W.reshape(W.shape[0], -1, n)  # (g, h, m, n) -> (g, h m, n): a view (the cut keeps rows whole)
            Qg = Q4[cut].reshape(W3.shape[0], -1, dk)  # (g, h m, dk): a view

            def fill(Kx, post):  # W <- Q K^T (* post), soft-capped, + Mask
                np.matmul(Qg, Kx[g], out=W3)  # (g, h m, dk) x (g, dk, n) -> (g, h m, n)
                if post is not None:
                    scale_(W, post)
                softcap_(W, cap)
                if mask is not None:
                    np.add(W, mask, out=W)  # (.., m, n) + (m, n)

            sink = None  # the sink logit of each of W3's rows (head-major, as W3's rows are)
            if sinks is not None:
                per_head = sinks.reshape(G, r)[cut]  # (g, h)
                sink = np.repeat(per_head, m, axis=-1)  # (g, h m)
            attend_(W3, fill, ones, Kt, Kts, s, sink)
            np.matmul(W3, V[g], out=out4[cut].reshape(W3.shape[0], -1, dv))  # (g, h m, n) x (g, n, dv)

        chunks = _chunks(G, r, threads.THREADS if parallel else 1)
        threads.run_tasks(chunks, work, parallel, one_blas=size >= ONE_BLAS_BYTES)
        return out, weights

    plan = plan_blocks(mask, m, n, block_rows(n, Q.dtype.itemsize))
    skips = any(b.c0 > 0 or b.c1 < n for b in plan)
    weights = into if into is not None else (np.zeros if skips else np.empty)((tau, m, n), dtype=Q.dtype)  # 0 skipped
    work = _block_work(Q, Kt, Kts, V, mask, s, cap, sinks, out, plan, weights)
    threads.run_tasks(_by_cost(tau, plan), work, parallel, one_blas=True)
    return out, weights
