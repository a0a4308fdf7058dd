"""Long documents under a sliding window: only the band (tau, m, n_c) is computed, never an m x m array.

Query i sees the n_c most recent keys V_[i-n_c+1, i]; the band holds exactly those weights:
band[j, i, t] = weight of head j's query i on key i - n_c + 1 + t (t = n_c - 1 is the query itself; slots before
position 0 hold 0 and have key -1 in `keys`). See qkv_cli.banded for the kernel.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from qkv_cli import budget
from qkv_cli.config import Settings
from qkv_cli.embed import embed
from qkv_cli.projection import combine, init_projections, project

BAND_MIN_TOKENS = 1024  # from this many tokens on, a --window run keeps only the band
HINTS = "--dtype float32, a smaller --window, fewer heads (--tau), a smaller --d, or a shorter text"


@dataclass
class BandResult:
    """A sliding-window run that kept only the band of the weights."""

    settings: Settings
    tokens: object
    H: np.ndarray  # (m, d)
    Wq: np.ndarray  # (tau, d, dk)
    Wk: np.ndarray  # (G, d, dk)
    Wv: np.ndarray
    Q: np.ndarray  # (tau, m, dk)
    K: np.ndarray  # (G, m, dk)
    V: np.ndarray
    band: np.ndarray  # (tau, m, n_c)
    keys: np.ndarray  # (m, n_c) key position of each band slot, -1 before the text starts
    heads: np.ndarray  # (tau, m, dk)
    Wo: np.ndarray  # (d, d)
    output: np.ndarray  # (m, d)
    scale: float

    @property
    def labels(self) -> list[str]:
        return list(self.tokens.labels)


def estimate(m: int, settings: Settings) -> int:
    itemsize = 4 if settings.dtype == "float32" else 8
    return budget.attention_bytes(m, m, settings.d, settings.tau, itemsize, band=settings.window)


def run(text: str, settings: Settings, max_memory: int | None = None):
    """A BandResult for long texts; shorter ones go through the dense pipeline (a Result)."""
    from qkv_cli import pipeline
    from qkv_cli.banded import band_keys, banded_attention
    from qkv_cli.kernels import resolve_scale
    from qkv_cli.tokens import tokenize

    limit = budget.default_max_memory() if max_memory is None else max_memory
    budget.check_text(text, lambda t: len(tokenize(t, settings.tokenizer)), lambda k: estimate(k, settings), limit,
                      HINTS)  # fmt: skip
    tokens = tokenize(text, settings.tokenizer)
    m = len(tokens)
    if m < BAND_MIN_TOKENS:
        return pipeline.run(text, settings, tokens=tokens, max_memory=max_memory)
    budget.check_budget(estimate(m, settings), limit, HINTS)
    dtype = np.dtype(settings.dtype)
    H = embed(list(tokens.strings), settings.d, settings.seed, settings.positions, dtype)
    Wq, Wk, Wv, Wo = init_projections(settings.d, settings.tau, settings.seed, settings.projection, dtype,
                                      kv_heads=settings.kv_heads)  # fmt: skip
    Q, K, V = project(H, Wq), project(H, Wk), project(H, Wv)
    scale = resolve_scale(settings.scale, settings.d_k)
    heads, band = banded_attention(Q, K, V, settings.window, scale)
    return BandResult(settings, tokens, H, Wq, Wk, Wv, Q, K, V, band, band_keys(m, band.shape[-1]), heads, Wo,
                      combine(heads, Wo), scale)  # fmt: skip


def summary(result: BandResult, heads) -> list[dict]:
    """Per head, means over queries: entropy (nats), largest weight, distance i - key, weight on self."""
    from qkv_cli.summary import row_entropy

    n_c = result.band.shape[-1]
    offsets = np.arange(n_c - 1, -1, -1, dtype=np.float64)  # distance i - key of each band slot
    rows = []
    for j in heads:
        b = result.band[j]
        rows.append({"head": j, "entropy": float(row_entropy(b).mean()), "max_weight": float(b.max(-1).mean()),
                     "mean_distance": float((b @ offsets).mean()), "self_share": float(b[:, -1].mean())})  # fmt: skip
    return rows


def strongest_links(result: BandResult, head: int, k: int = 8) -> list[tuple[int, int, float]]:
    """The k largest weights of a head from a query to another token: (query, key, weight)."""
    b = result.band[head].astype(np.float64)
    b = np.where(result.keys >= 0, b, -1.0)
    b[:, -1] = -1.0  # leave out each token's weight on itself
    flat = np.argpartition(b.ravel(), -k)[-k:] if b.size > k else np.arange(b.size)
    flat = flat[np.argsort(-b.ravel()[flat])]
    i, t = np.unravel_index(flat, b.shape)
    return [(int(a), int(result.keys[a, c]), float(b[a, c])) for a, c in zip(i, t, strict=True) if b[a, c] >= 0]


def arrays(result: BandResult) -> dict:
    """NPZ of a band run: the core schema without the m x m matrices, plus weights_band and band_keys."""
    s = result.settings
    return {
        "tokens": np.array(list(result.tokens.strings), dtype=str),
        "H": result.H, "Wq": result.Wq, "Wk": result.Wk, "Wv": result.Wv, "Q": result.Q, "K": result.K,
        "V": result.V, "weights_band": result.band, "band_keys": result.keys, "heads": result.heads,
        "Wo": result.Wo, "output": result.output, "d": np.int64(s.d), "tau": np.int64(s.tau),
        "scale": np.float64(result.scale), "seed": np.int64(s.seed), "kernel": np.array("banded"),
        "window": np.int64(result.band.shape[-1]),
    }  # fmt: skip
