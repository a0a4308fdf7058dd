"""Shape arithmetic for every matrix of masked multi-head attention (pure Python: no numpy import)."""

from __future__ import annotations

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


def matrices(
    d: int, tau: int, m: int, n: int | None = None, kv_heads: int | None = None, d_k: int | None = None
) -> list[Matrix]:
    """Every matrix of one attention layer; per-head matrices give one head's shape and count = tau.

    d_k: a checkpoint's head width when it is not d / tau (Qwen 3, Gemma); W^o is then (tau d_k) x d."""
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
    return [
        Matrix("H", "H", m, d, 1, 0, 0, "input: token embeddings + positions"),
        Matrix("W_q", "W_j^q", d, dk, tau, tau * d * dk, 0, "query projection of head j"),
        Matrix("W_k", "W_j^k", d, dk, G, G * d * dk, 0, "key projection of head j"),
        Matrix("W_v", "W_j^v", d, dk, G, G * d * dk, 0, "value projection of head j"),
        Matrix("Q", "Q^[j] = H W_j^q", m, dk, tau, 0, tau * 2 * m * d * dk, "queries of head j"),
        Matrix("K", "K^[j] = H W_j^k", n, dk, G, 0, G * 2 * n * d * dk, "keys of head j"),
        Matrix("V", "V^[j] = H W_j^v", n, dk, G, 0, G * 2 * n * d * dk, "values of head j"),
        Matrix("scores", "S = Q K^T/sqrt(d_k)", m, n, tau, 0, tau * (2 * m * n * dk + m * n), "scaled scores"),
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
