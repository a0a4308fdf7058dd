"""text -> tokens -> H -> Q, K, V -> Softmax(Q K^T * scale + Mask) V -> concat W^o, as one Result."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from qkv_cli import budget
from qkv_cli.config import Settings
from qkv_cli.embed import embed
from qkv_cli.kernels import attention, resolve_scale
from qkv_cli.masks import build_mask
from qkv_cli.projection import combine, init_projections, project


@dataclass
class Result:
    """Every intermediate matrix of one run, named as in the export schema."""

    settings: Settings
    tokens: object  # qkv_cli.tokens.Tokens
    H: np.ndarray  # (m, d)
    Wq: np.ndarray  # (tau, d, dk)
    Wk: np.ndarray
    Wv: np.ndarray
    Q: np.ndarray  # (tau, m, dk)
    K: np.ndarray
    V: np.ndarray
    scores: np.ndarray  # (tau, m, n), scaled, before the mask
    mask: np.ndarray  # (m, n) additive: 0 or -inf
    weights: np.ndarray  # (tau, m, n)
    heads: np.ndarray  # (tau, m, dk) per-head outputs alpha V
    Wo: np.ndarray  # (d, d)
    output: np.ndarray  # (m, d)
    scale: float
    extra: dict = field(default_factory=dict)

    @property
    def labels(self) -> list[str]:
        return list(self.tokens.labels)

    @property
    def key_labels(self) -> list[str]:
        return list(self.extra.get("key_labels", self.tokens.labels))

    @property
    def masked(self) -> np.ndarray:  # (m, n) bool: True where the mask removed the key
        return np.isneginf(self.mask)

    @property
    def empty_rows(self) -> np.ndarray:  # (m,) bool: queries with every key masked (their weights are 0)
        return self.masked.all(axis=1)


def estimate(m: int, settings: Settings) -> int:
    itemsize = 4 if settings.dtype == "float32" else 8
    return budget.attention_bytes(m, m, settings.d, settings.tau, itemsize)


def run(text: str, settings: Settings, *, tokens=None, max_memory: int | None = None) -> Result:
    """The whole pipeline on random (seeded) weights."""
    from qkv_cli.tokens import tokenize

    tokens = tokenize(text, settings.tokenizer) if tokens is None else tokens
    m = len(tokens)
    budget.check_budget(
        estimate(m, settings),
        budget.default_max_memory() if max_memory is None else max_memory,
        "--dtype float32, fewer heads (--tau), or a shorter text",
    )
    dtype = np.dtype(settings.dtype)
    H = embed(list(tokens.strings), settings.d, settings.seed, settings.positions, dtype)
    Wq, Wk, Wv, Wo = init_projections(settings.d, settings.tau, settings.seed, settings.projection, dtype)
    Q, K, V = project(H, Wq), project(H, Wk), project(H, Wv)  # (tau, m, dk) each
    scale = resolve_scale(settings.scale, settings.d_k)
    mask = build_mask(m, causal=settings.causal, window=settings.window, dtype=dtype)
    heads, weights = attention(Q, K, V, mask=mask, scale=scale, kernel=settings.kernel)
    scores = (Q @ K.transpose(0, 2, 1)) * dtype.type(scale)  # (tau, m, dk) x (tau, dk, m) -> (tau, m, m)
    return Result(
        settings=settings,
        tokens=tokens,
        H=H,
        Wq=Wq,
        Wk=Wk,
        Wv=Wv,
        Q=Q,
        K=K,
        V=V,
        scores=scores,
        mask=np.zeros((m, m), dtype=dtype) if mask is None else mask,
        weights=weights,
        heads=heads,
        Wo=Wo,
        output=combine(heads, Wo),
        scale=scale,
    )
