"""Att(Q, K, V) = Softmax(Q K^T * scale + Mask) V for tau heads, with interchangeable kernels.

Every kernel has one signature, ``kernel(Q, K, V, mask, scale) -> (out, weights)``:
Q (tau, m, d_k), K (G, n, d_k), V (G, n, d_v), mask (m, n) additive or None, scale a Python float;
returns out (tau, m, d_v) and weights (tau, m, n) in Q's dtype. G = tau is ordinary multi-head attention;
G < tau (tau divisible by G) is grouped-query attention: query head j uses key/value head j // (tau // G).

How the vectorized kernel stays fast and lean (an inspector keeps every weight, so the weights are the output):
- the scale is folded into Q (m x d_k numbers, not m x n), in Q's dtype;
- scores are written straight into the output weights array and the softmax runs there in place: exp, row sums
  as one BLAS product ``alpha @ 1``, rows multiplied by 1 / sum (see :func:`exp_normalize_` for why the row-max
  pass can be skipped safely, and the exact fallback when it cannot);
- inputs above BLOCKED_BYTES go in row blocks (one head, at most 128 rows and about 2 MB), so exp and the sums
  run in cache, and the blocks are the unit of work for the threads; per row block the
  planner (:func:`plan_blocks`) finds the key columns outside which the mask is exactly -inf (never computed:
  those weights stay exactly 0) and the columns where it is exactly 0 (nothing to add). A dense causal matrix
  thus computes only the lower-triangular blocks and adds the mask on the diagonal blocks only; a sliding window
  computes only a band of blocks. Each claim is verified on the mask itself, so a matrix that merely looks
  causal is still computed exactly as given;
- the work is split over 2 Python threads (NumPy releases the GIL) with BLAS held to 1 thread by threadpoolctl,
  which is optional: without it everything runs on the calling thread and BLAS keeps its own threads;
- small inputs take one unblocked pass over all heads (in two halves, one per thread, from PARALLEL_BYTES on).
The mask is never copied. Peak memory: weights + out + Q * scale + a few row vectors.
"""

from __future__ import annotations

import math
import os
import threading
from itertools import pairwise
from typing import NamedTuple

import numpy as np

from qkv_cli.errors import QkvError

BLOCK_BYTES = 2 * 1024 * 1024  # target size of one row block of scores (one head)
MAX_BLOCK_ROWS = 128  # taller blocks would skip less of a causal triangle
BLOCKED_BYTES = 1024 * 1024  # weights larger than this go in planned row blocks, smaller in one pass
PARALLEL_BYTES = 256 * 1024  # weights from this size on are split over THREADS Python threads
THREADS = max(1, min(2, os.cpu_count() or 1))

# exp_normalize_ accepts a row when its sum of exp(scores) lies in [low, high]
_SAFE_TOTALS = {np.dtype(np.float32): (2.0**-60, 2.0**120), np.dtype(np.float64): (2.0**-900, 2.0**900)}


def softmax(x, axis=-1):  # [..., n] -> [..., n]; stable, a row with every key masked gives zeros
    """Softmax with the row max subtracted; rows that are all -inf give all zeros, never NaN."""
    x = np.where(np.isposinf(x), np.finfo(x.dtype).max, x)
    x_max = np.max(x, axis=axis, keepdims=True)
    x_max = np.where(np.isneginf(x_max), 0, x_max)
    e = np.exp(x - x_max)
    total = np.sum(e, axis=axis, keepdims=True)
    return np.divide(e, total, out=np.zeros_like(e), where=total > 0)


def softmax_rows_(x):  # [..., n] -> the same array, overwritten with its softmax over the last axis
    """Exact in-place softmax (row max subtracted) of finite or -inf scores; an all -inf row becomes zeros."""
    info = np.finfo(x.dtype)
    x_max = x.max(axis=-1, keepdims=True)
    np.maximum(x_max, -info.max, out=x_max)  # all -inf row: keep the max finite so -inf - max stays -inf
    x -= x_max
    np.exp(x, out=x)
    total = x.sum(axis=-1, keepdims=True)
    np.maximum(total, info.tiny, out=total)  # all -inf row: 0 * (1 / tiny) = 0, never 0 / 0
    np.reciprocal(total, out=total)
    x *= total
    return x


def exp_normalize_(x, ones):  # [..., n], [n] -> True and x = Softmax(x) in place; False (x is garbage)
    """Softmax without the row-max pass: exp, row sums as one BLAS product x @ 1, then x *= 1 / sum.

    Subtracting the max only protects exp from overflow and underflow, and the row sums reveal both: a sum in
    [2^-60, 2^120] (float32; [2^-900, 2^900] for float64) means no exp overflowed and the row max is above
    -60 ln 2 - ln n, so any weight that exp pushed into subnormals is below 1e-27 in absolute terms. The
    result then equals the max-subtracted softmax to rounding (it even skips the rounding of x - max).
    Otherwise (huge or +inf scores, a row with every key masked, all scores far below 0) this returns False
    and the caller recomputes the scores and uses the exact :func:`softmax_rows_`.
    """
    np.exp(x, out=x)
    total = np.matmul(x, ones)  # (..., n) x (n,) -> (...): the row sums, by BLAS
    low, high = _SAFE_TOTALS[x.dtype]
    if x.ndim == 1:  # one row (the loop kernel): Python scalars are cheaper
        t = float(total)
        if not low <= t <= high:
            return False
        x *= 1.0 / t
        return True
    if not (total.min() >= low and total.max() <= high):  # NaN fails as well
        return False
    np.reciprocal(total, out=total)
    x *= total[..., None]
    return True


def clip_scores_(scores, scale):  # [..., n] -> same array; the exact path only
    """scores *= scale, clipped to the finite range before the mask is added (so -inf comes from the mask only).

    The product is taken in float64 (a scale such as 1e300 does not fit in float32), then rounded to the scores'
    dtype: 0 * scale stays 0, anything too large becomes the largest finite value.
    """
    np.multiply(scores, np.float64(scale), out=scores)
    big = np.finfo(scores.dtype).max
    np.clip(scores, -big, big, out=scores)
    return scores


def attend_(weights, fill, ones, Q, Qs, s):  # in place: weights <- Softmax(scores)
    """fill(Q', post) writes Q' K^T (* post, clipped) + Mask into weights; fast try first, exact fallback."""
    fill(Qs, None)  # scale folded into Q
    if not exp_normalize_(weights, ones):
        fill(Q, s)  # the scale applied after Q K^T, clipped: no overflow can turn into NaN
        softmax_rows_(weights)


class Block(NamedTuple):
    """Rows i0:i1 compute key columns c0:c1 only (the mask is -inf elsewhere) and add the mask on ``adds``."""

    i0: int
    i1: int
    c0: int
    c1: int
    adds: tuple  # ((a0, a1), ...) column ranges where the mask must be added; elsewhere in c0:c1 it is 0


def _span(row):  # [n] -> (first, last) column that is not -inf, or None for an all -inf row
    allowed = np.flatnonzero(row != -np.inf)
    return (int(allowed[0]), int(allowed[-1])) if allowed.size else None


def plan_blocks(mask, m, n, rows):  # [m, n] or None -> list[Block]
    """Split the m query rows into blocks of ``rows`` and find, per block, what the mask lets us skip.

    The guess comes from the first and the last row: row i may attend to columns L(i)..U(i) with
    L(i) = max(L_first, L_last - (m - 1) + i) and U(i) = min(U_last, U_first + i) -- causal, sliding window,
    bottom-right causal (n > m) and key padding all have this shape. Each block then checks the guess on the
    mask: outside c0:c1 every entry must be -inf (else the block computes all n columns), and inside the zero
    region L(i1-1)..U(i0) every entry must be 0 (else the mask is added over all of c0:c1). So the plan is exact
    for any mask; the guess only decides how much is skipped. Cost: one read of the mask.
    """
    starts = range(0, m, rows)
    if mask is None:
        return [Block(i0, min(i0 + rows, m), 0, n, ()) for i0 in starts]
    first, last = _span(mask[0]), _span(mask[m - 1])
    if first is None or last is None:  # nothing to guess from: add the mask everywhere
        return [Block(i0, min(i0 + rows, m), 0, n, ((0, n),)) for i0 in starts]
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
            plan.append(Block(i0, i1, 0, n, ((0, n),)))  # the guess failed: every column, mask added everywhere
            continue
        z0, z1 = max(lo(i1 - 1), c0), min(hi(i0), c1)  # columns every row of the block may see
        if z0 < z1 and not block[:, z0:z1].any():  # any() is True for a nonzero or a NaN entry
            adds = tuple((a, b) for a, b in ((c0, z0), (z1, c1)) if a < b)
        else:
            adds = ((c0, c1),)
        plan.append(Block(i0, i1, c0, c1, adds))
    return plan


def block_rows(n, itemsize):  # -> rows per block: about BLOCK_BYTES of scores, a multiple of 8
    rows = BLOCK_BYTES // max(1, n * itemsize)
    return int(max(8, min(MAX_BLOCK_ROWS, rows // 8 * 8)))


_lock = threading.Lock()
_blas = None  # threadpoolctl controller, or False without threadpoolctl
_pool = None  # THREADS - 1 helper threads, started on first use


def _one_blas_thread():  # -> context manager holding BLAS to 1 thread, or None without threadpoolctl
    global _blas
    with _lock:
        if _blas is None:
            try:
                from threadpoolctl import ThreadpoolController
            except ImportError:
                _blas = False
            else:
                _blas = ThreadpoolController()
    return _blas.limit(limits=1, user_api="blas") if _blas else None


def _helpers():
    global _pool
    with _lock:
        if _pool is None:
            from concurrent.futures import ThreadPoolExecutor

            _pool = ThreadPoolExecutor(max_workers=THREADS - 1, thread_name_prefix="qkv-kernel")
    return _pool


def run_tasks(tasks, work, parallel):  # tasks sorted by cost, cheapest first
    """work(task) for every task; on THREADS threads when ``parallel`` (BLAS then held to 1 thread)."""
    limiter = _one_blas_thread() if parallel and THREADS > 1 and len(tasks) > 1 else None
    if limiter is None:
        for task in tasks:
            work(task)
        return
    from concurrent.futures import wait

    pending = list(tasks)

    def worker():  # NumPy's error state is per thread: helpers ignore overflow like the caller
        with np.errstate(over="ignore", invalid="ignore"):
            work_all()

    def work_all():
        while True:
            try:
                task = pending.pop()  # atomic: the costliest remaining task first
            except IndexError:
                return
            try:
                work(task)
            except BaseException:
                pending.clear()
                raise

    with limiter:
        futures = [_helpers().submit(worker) for _ in range(THREADS - 1)]
        try:
            worker()
        finally:
            wait(futures)  # never lift the BLAS limit while a helper still runs
    for future in futures:
        future.result()


def _chunks(G, r, parts):  # -> slices of the (G, r) head grid, ``parts`` of them when possible
    axis, size = (0, G) if G >= parts else (1, r)
    edges = [size * k // parts for k in range(parts + 1)]
    cuts = [slice(a, b) for a, b in pairwise(edges) if a < b]
    return [(cut, slice(None)) if axis == 0 else (slice(None), cut) for cut in cuts]


def vectorized_kernel(Q, K, V, mask, scale):  # [tau,m,dk], [G,n,dk], [G,n,dv], [m,n] -> [tau,m,dv], [tau,m,n]
    """All heads at once: batched matmuls over the head axis, softmax in place inside the weights array."""
    with np.errstate(over="ignore", invalid="ignore"):  # overflow is caught by exp_normalize_'s check
        return _vectorized(Q, K, V, mask, float(scale))


def _vectorized(Q, K, V, mask, s):
    tau, m, dk = Q.shape
    G, n, dv = V.shape
    r = tau // G
    Qs = Q * Q.dtype.type(s)  # the scale folded into Q: (tau, m, dk) (inf if s does not fit: then exact path)
    Kt = K.transpose(0, 2, 1)  # K^T: (G, dk, n), a view
    V = np.ascontiguousarray(V)
    ones = np.ones(n, dtype=Q.dtype)
    out = np.empty((tau, m, dv), dtype=Q.dtype)
    size = tau * m * n * Q.dtype.itemsize
    parallel = size >= PARALLEL_BYTES

    if size <= BLOCKED_BYTES:  # one unblocked pass over all heads (a half per thread)
        weights = np.empty((tau, m, n), dtype=Q.dtype)
        W4 = weights.reshape(G, r, m, n)  # query head j = (g, h): key/value head g, h-th head sharing it
        out4 = out.reshape(G, r, m, dv)

        def work(cut):
            W = W4[cut]

            def fill(Qx, post):  # W <- Q K^T (* post) + Mask
                np.matmul(Qx.reshape(G, r, m, dk)[cut], Kt[cut[0], None], out=W)  # (.., m, dk) x (.., dk, n)
                if post is not None:
                    clip_scores_(W, post)
                if mask is not None:
                    np.add(W, mask, out=W)  # (.., m, n) + (m, n)

            attend_(W, fill, ones, Q, Qs, s)
            np.matmul(W, V[cut[0], None], out=out4[cut])  # (.., m, n) x (.., n, dv)

        run_tasks(_chunks(G, r, THREADS if parallel else 1), work, parallel)
        return out, weights

    plan = plan_blocks(mask, m, n, block_rows(n, Q.dtype.itemsize))
    skips = any(b.c0 > 0 or b.c1 < n for b in plan)
    weights = (np.zeros if skips else np.empty)((tau, m, n), dtype=Q.dtype)  # skipped columns stay exactly 0

    def work(task):  # one head j, one row block b
        j, b = task
        g = j // r
        W = weights[j, b.i0 : b.i1, b.c0 : b.c1]  # a view: the softmax runs in the output itself

        def fill(Qx, post):  # W <- Q K^T (* post) + Mask on this block
            np.matmul(Qx[j, b.i0 : b.i1], Kt[g, :, b.c0 : b.c1], out=W)  # (rows, dk) x (dk, cols)
            if post is not None:
                clip_scores_(W, post)
            for a0, a1 in b.adds:
                W[:, a0 - b.c0 : a1 - b.c0] += mask[b.i0 : b.i1, a0:a1]

        attend_(W, fill, ones[: b.c1 - b.c0], Q, Qs, s)
        np.matmul(W, V[g, b.c0 : b.c1], out=out[j, b.i0 : b.i1])  # (rows, cols) x (cols, dv)

    tasks = sorted(((j, b) for j in range(tau) for b in plan), key=lambda t: (t[1].i1 - t[1].i0) * (t[1].c1 - t[1].c0))
    run_tasks(tasks, work, parallel)
    return out, weights


def loop_kernel(Q, K, V, mask, scale):  # same signature; one query at a time
    """Att(q_i, K, V) = Softmax(q_i K^T * scale + Mask_i) V, looping over heads j and queries i."""
    tau, m, _ = Q.shape
    G, n, dv = V.shape
    r = tau // G
    ones = np.ones(n, dtype=Q.dtype)
    out = np.empty((tau, m, dv), dtype=Q.dtype)
    weights = np.empty((tau, m, n), dtype=Q.dtype)
    with np.errstate(over="ignore", invalid="ignore"):  # overflow is caught by exp_normalize_'s check
        Qs = Q * Q.dtype.type(scale)  # the scale folded into every q_i once
        for j in range(tau):
            K_j, V_j = K[j // r], V[j // r]  # grouped-query: head j reads key/value head j // r
            for i in range(m):
                alpha = weights[j, i]  # (n,): the scores, then the weights, live in the output row
                np.matmul(K_j, Qs[j, i], out=alpha)  # q_i K^T * scale: (n, dk) x (dk,) -> (n,)
                if mask is not None:
                    alpha += mask[i]  # + Mask_i
                if not exp_normalize_(alpha, ones):  # Softmax in place; if a sum was out of range, exactly:
                    np.matmul(K_j, Q[j, i], out=alpha)
                    clip_scores_(alpha, scale)  # * scale, clipped to the finite range
                    if mask is not None:
                        alpha += mask[i]
                    softmax_rows_(alpha)
                np.matmul(alpha, V_j, out=out[j, i])  # weighted sum of the rows of V: (n,) x (n, dv) -> (dv,)
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
    A float32 or float64 mask is used as given (never copied); other dtypes are converted to Q's dtype.
    """
    check_inputs(Q, K, V, mask)
    run = get_kernel(kernel)
    if Q.shape[1] == 0 or K.shape[1] == 0:  # no queries, or no keys (every row fully masked): zeros
        tau, m, _ = Q.shape
        return np.zeros((tau, m, V.shape[-1]), dtype=Q.dtype), np.zeros((tau, m, K.shape[1]), dtype=Q.dtype)
    if mask is not None and mask.dtype not in (np.float32, np.float64):
        mask = mask.astype(Q.dtype)
    return run(Q, K, V, mask, resolve_scale(scale, Q.shape[-1]))
