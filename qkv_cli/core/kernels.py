"""The kernel registry and ``attention``, the public entry point.

Every kernel has one signature, ``kernel(Q, K, V, mask, scale, softcap=None, into=None, sinks=None) -> (out,
weights)``:
Q (tau, m, d_k), K (G, n, d_k), V (G, n, d_v), mask (m, n) additive or None, scale a Python float, into None
or a zero-filled (tau, m, n) array to hold the weights; returns out (tau, m, d_v) and weights (tau, m, n) (into
itself when given) in Q's dtype; sinks None or (tau,) sink logits in Q's dtype (gpt-oss: head j's rows are
Softmax([scores, s_j]) with the sink column dropped). G = tau is ordinary multi-head attention; G < tau
(tau divisible by G) is grouped-query attention. A new kernel is one function and one entry in KERNELS: the
contract tests (tests/core/test_kernels.py) and the CLI's --kernel choices read this dict.
The entries name their function as "module:function" and are imported on first use, so listing the kernels
(qkv --help) imports no NumPy.
"""

from __future__ import annotations

import importlib
import math

from qkv_cli.errors import QkvError


class _Registry(dict):
    """name -> kernel function; an entry given as "module:function" is imported the first time it is used."""

    def __getitem__(self, name):
        target = super().__getitem__(name)
        if isinstance(target, str):
            module, _, function = target.partition(":")
            target = getattr(importlib.import_module(module), function)
            super().__setitem__(name, target)
        return target

    def values(self):
        return [self[name] for name in self]

    def items(self):
        return [(name, self[name]) for name in self]


KERNELS = _Registry(
    vectorized="qkv_cli.core.vectorized:vectorized_kernel",  # batched matmuls over all heads, softmax in place
    loop="qkv_cli.core.loop:loop_kernel",  # one query at a time: Att(q_i, K, V)
    reference="qkv_cli.core.formula:reference_kernel",  # the formula, line for line
)
KERNEL_HELP = {
    "vectorized": "batched matmuls over all heads, softmax in place (the fast default)",
    "loop": "one query at a time: Att(q_i, K, V)",
    "reference": "the formula line for line, Softmax(Q K^T * scale + Mask) V",
}


def get_kernel(name: str):
    """The kernel registered under ``name``; an unknown name lists the valid ones."""
    check_kernel(name)
    return KERNELS[name]


def check_kernel(name: str) -> str:
    """``name`` if it is a registered kernel (without importing it); else an error listing the valid ones."""
    if not isinstance(name, str) or name not in KERNELS:
        raise QkvError(f"unknown kernel {name!r}: choose one of {', '.join(KERNELS)}")
    return name


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
    except (TypeError, ValueError, OverflowError):
        raise QkvError(f"scale {scale!r} is not valid: use auto, none, sqrt or a finite number") from None
    if not math.isfinite(value):
        raise QkvError(f"scale {scale!r} is not finite: use auto, none, sqrt or a finite number")
    return value


def check_inputs(Q, K, V, mask):
    """Shapes and dtypes the kernels rely on; raises QkvError naming what is wrong."""
    import numpy as np

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


def check_sinks(sinks, tau: int, dtype):
    """The sink logits as a (tau,) array of Q's dtype; a wrong shape or a non-finite value is refused."""
    import numpy as np

    shape = getattr(sinks, "shape", None)
    try:
        s = np.asarray(sinks, dtype=np.float64)
    except (TypeError, ValueError):
        raise QkvError(f"sinks must be numbers, one per query head ({tau}), got {type(sinks).__name__}") from None
    if s.shape != (tau,):
        raise QkvError(f"sinks must hold one logit per query head ({tau},), got shape {shape or s.shape}")
    if not np.isfinite(s).all():
        raise QkvError("sinks must be finite numbers")
    return s.astype(dtype)


def attention(Q, K, V, mask=None, scale=None, kernel="vectorized", softcap=None, into=None, rows=None, sinks=None):
    """out, weights = Softmax(Q K^T * scale + mask) V.

    Q (tau, m, d_k), K (G, n, d_k), V (G, n, d_v) with G dividing tau; mask (m, n) additive (0 / -inf) or
    None; scale None means 1/sqrt(d_k); softcap c applies tanh(S / c) * c to the scaled scores before the mask.
    Returns out (tau, m, d_v) and weights (tau, m, n) in Q's dtype. A float32 or float64 mask is used as given
    (never copied); other dtypes are converted to Q's dtype. into: a zero-filled row-major (tau, m, n) array of
    Q's dtype (a model's slot for this layer) that becomes the weights: written once, not written and copied.
    rows (r0, r1): keep only the weights of queries r0..r1-1 (weights (tau, r1 - r0, n); into that shape); every
    query is still computed, its softmax over all its keys: the vectorized kernel holds one block of rows at a time.
    sinks: None, or one finite logit per query head (tau,): head j's softmax runs over [scores, s_j] and the sink
    column is dropped, so each row sums to 1 minus the sink's share (a row with every key masked: zeros).
    """
    import numpy as np

    check_inputs(Q, K, V, mask)
    run = get_kernel(kernel)
    tau, m, _ = Q.shape
    r0, r1 = (0, m) if rows is None else rows
    if not 0 <= r0 <= r1 <= m:
        raise QkvError(f"rows must be a range within 0..{m}, got {rows}")
    kept = (tau, r1 - r0, K.shape[1])
    fits = into is None or (into.shape == kept and into.dtype == Q.dtype and into.flags.c_contiguous)
    if not fits:
        raise QkvError(f"into must be a row-major {Q.dtype} array of shape {kept}, got {into.dtype} "
                       f"{into.shape}{'' if into.flags.c_contiguous else ' (strided)'}")  # fmt: skip
    if m == 0 or K.shape[1] == 0:  # no queries, or no keys (every row fully masked): zeros
        weights = np.zeros(kept, dtype=Q.dtype) if into is None else into
        return np.zeros((tau, m, V.shape[-1]), dtype=Q.dtype), weights
    if mask is not None and mask.dtype not in (np.float32, np.float64):
        mask = mask.astype(Q.dtype)
    s = resolve_scale(scale, Q.shape[-1])
    more = {} if sinks is None else {"sinks": check_sinks(sinks, tau, Q.dtype)}
    if rows is None:
        return run(Q, K, V, mask, s, softcap, into=into, **more)
    if kernel == "vectorized":  # computes each block of rows in a scratch array, keeps r0..r1
        return run(Q, K, V, mask, s, softcap, into=into, rows=(r0, r1), **more)
    out, weights = run(Q, K, V, mask, s, softcap, **more)
    if into is None:
        return out, np.ascontiguousarray(weights[:, r0:r1])
    into[:] = weights[:, r0:r1]
    return out, into
