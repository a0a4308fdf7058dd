"""Shape arithmetic for every matrix of masked multi-head attention (pure Python: no numpy import)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from qkv_cli.core.settings import check_sizes
from qkv_cli.errors import QkvError

ITEMSIZE = {"float64": 8, "float32": 4}


@dataclass(frozen=True)
class Matrix:
    name: str  # the export / JSON name
    notation: str  # as in the book
    rows: int
    cols: int
    count: int  # how many of them (tau for per-head matrices)
    params: int  # learned parameters, all copies
    flops: int  # to compute it, all copies (multiply-add = 2)
    meaning: str

    @property
    def shape(self) -> str:
        return f"{self.rows} x {self.cols}"


INPUT = "input: token embeddings + positions"


SCORES = {"plain": "Q K^T / sqrt(d_k)", "one": "Q K^T", "times": "Q K^T * sqrt(d_k)", "other": "Q K^T * scale"}


def scale_kind(d_k: int, scale: float | None = None) -> str:
    """Which SCORES formula a scale is: 1/sqrt(d_k) (None: the default), 1, sqrt(d_k), or another number."""
    if scale is None or math.isclose(scale, d_k**-0.5, rel_tol=1e-9):
        return "plain"
    if scale == 1:
        return "one"
    return "times" if math.isclose(scale, d_k**0.5, rel_tol=1e-9) else "other"


def scale_root(scale: float) -> int | None:
    """s when scale = s^-1/2 for a whole number s (a checkpoint's query_pre_attn_scalar), else None."""
    if not 1e-6 < scale < 1:  # also keeps scale**-2 from overflowing
        return None
    s = scale**-2
    return round(s) if math.isclose(s, round(s), rel_tol=1e-9) else None


def scores_formula(d_k: int, scale: float | None = None, softcap: float | None = None, tight: bool = False) -> str:
    """The scores before the mask as a run computes them: Q K^T / sqrt(d_k), or Q K^T with its own scale, and
    tanh(S / c) * c around it where logits are soft-capped (Gemma 2). tight: no spaces around / sqrt(d_k)."""
    kind = scale_kind(d_k, scale)
    S = "Q K^T/sqrt(d_k)" if tight and kind == "plain" else SCORES[kind]
    return S if softcap is None else f"tanh({S} / c) * c"


def scale_words(d_k: int, scale: float | None = None, softcap: float | None = None, root: bool = False) -> str:
    """What scores_formula leaves as letters: 'scale = 6^-1/2 = 0.4082, c = 5' ('' for plain 1/sqrt(d_k)).

    root: also write the scale as s^-1/2 when s is a whole number (a checkpoint's query_pre_attn_scalar)."""
    words = []
    if scale_kind(d_k, scale) == "other":
        s = scale_root(scale) if root else None
        words.append(f"scale = {s}^-1/2 = {scale:.4g}" if s else f"scale = {scale:.4g}")
    if softcap is not None:
        words.append(f"c = {softcap:g}")
    return ", ".join(words)


def matrices(
    d: int,
    tau: int,
    m: int,
    n: int | None = None,
    kv_heads: int | None = None,
    d_k: int | None = None,
    scale: float | None = None,
    softcap: float | None = None,
    input_meaning: str = INPUT,
) -> list[Matrix]:
    """Every matrix of one attention layer; per-head matrices give one head's shape and count = tau.

    d_k: a checkpoint's head width when it is not d / tau (Qwen 3, Gemma); W^o is then (tau d_k) x d. scale and
    softcap: a checkpoint's own (default 1/sqrt(d_k), no cap); input_meaning: what H is."""
    if d_k is None:
        dk = check_sizes(d, tau, kv_heads)
    else:
        dk = d_k
        if kv_heads is not None and (kv_heads < 1 or tau % kv_heads):
            raise QkvError(f"--kv-heads ({kv_heads}) must divide tau ({tau})")
    if m < 1:
        raise QkvError(f"m must be at least 1, got {m}")
    n = m if n is None else n
    if n < 1:
        raise QkvError(f"n must be at least 1, got {n}")
    G = tau if kv_heads is None else kv_heads
    S = scores_formula(dk, scale, softcap, tight=True)  # tight in a narrow column
    scored = "scaled scores" + (", soft-capped" if softcap is not None else "")
    return [
        Matrix("H", "H", m, d, 1, 0, 0, input_meaning),
        Matrix("W_q", "W_j^q", d, dk, tau, tau * d * dk, 0, "query projection of head j"),
        Matrix("W_k", "W_j^k", d, dk, G, G * d * dk, 0, "key projection of head j"),
        Matrix("W_v", "W_j^v", d, dk, G, G * d * dk, 0, "value projection of head j"),
        Matrix("Q", "Q^[j] = H W_j^q", m, dk, tau, 0, tau * 2 * m * d * dk, "queries of head j"),
        Matrix("K", "K^[j] = H W_j^k", n, dk, G, 0, G * 2 * n * d * dk, "keys of head j"),
        Matrix("V", "V^[j] = H W_j^v", n, dk, G, 0, G * 2 * n * d * dk, "values of head j"),
        Matrix("scores", f"S = {S}", m, n, tau, 0, tau * (2 * m * n * dk + m * n), scored),
        Matrix("mask", "Mask", m, n, 1, 0, tau * m * n, "0 = may attend, -inf = may not"),
        Matrix("weights", "alpha = Softmax(S+Mask)", m, n, tau, 0, tau * 4 * m * n, "attention weights"),
        Matrix("head_output", "alpha V^[j]", m, dk, tau, 0, tau * 2 * m * n * dk, "output of head j"),
        Matrix("concat", "concat(heads)", m, tau * dk, 1, 0, 0, "heads side by side"),
        Matrix("W_o", "W^o", tau * dk, d, 1, tau * dk * d, 0, "output projection"),
        Matrix("output", "concat W^o", m, d, 1, 0, 2 * m * tau * dk * d, "multi-head output"),
    ]


def as_json(d: int, tau: int, m: int, mats: list[Matrix], n: int | None = None, dtype: str = "float64") -> dict:
    itemsize = ITEMSIZE[dtype]
    return {
        "d": d,
        "tau": tau,
        "m": m,
        "n": m if n is None else n,
        "d_k": mats[1].cols,
        "dtype": dtype,
        "matrices": {x.name: [x.rows, x.cols] for x in mats},
        "count": {x.name: x.count for x in mats},
        "params": {x.name: x.params for x in mats},
        "flops": {x.name: x.flops for x in mats},
        "bytes": {x.name: x.rows * x.cols * x.count * itemsize for x in mats},
        "total_params": sum(x.params for x in mats),
        "total_flops": sum(x.flops for x in mats),
    }
