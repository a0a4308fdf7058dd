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


HINTS = "--dtype float32, fewer heads (--tau), a smaller --d, or a shorter text"


def estimate(m: int, settings: Settings, n: int | None = None) -> int:
    itemsize = 4 if settings.dtype == "float32" else 8
    return budget.attention_bytes(m, m if n is None else n, settings.d, settings.tau, itemsize)


def run(
    text: str,
    settings: Settings,
    *,
    tokens=None,
    max_memory: int | None = None,
    context: str | None = None,
    context_tokens=None,
    allowed=None,
    padding=None,
) -> Result:
    """The whole pipeline on random (seeded) weights.

    context / context_tokens: cross-attention, keys and values from this text (see qkv_cli.cross).
    allowed: a custom (m, n) bool grid, True = may attend (--mask-file); padding: (n,) bool, True = pad key.
    """
    from qkv_cli import ablate, cross, maskgrid
    from qkv_cli.tokens import tokenize

    cross.check(settings, context is not None or context_tokens is not None)
    limit = budget.default_max_memory() if max_memory is None else max_memory
    if tokens is None and context is None and context_tokens is None:  # refuse a huge text before tokenizing it
        budget.check_text(
            text, lambda t: len(tokenize(t, settings.tokenizer)), lambda k: estimate(k, settings), limit, HINTS
        )
    tokens = tokenize(text, settings.tokenizer) if tokens is None else tokens
    if context_tokens is None and context is not None:
        context_tokens = tokenize(context, settings.tokenizer)
    m = len(tokens)
    n = m if context_tokens is None else len(context_tokens)
    if allowed is not None:
        maskgrid.check_shape(allowed, m, n, "--mask-file")
    budget.check_budget(estimate(m, settings, n), limit, HINTS)
    dtype = np.dtype(settings.dtype)
    H = embed(list(tokens.strings), settings.d, settings.seed, settings.positions, dtype)
    Y = (
        H
        if context_tokens is None
        else embed(list(context_tokens.strings), settings.d, settings.seed, settings.positions, dtype)
    )  # keys/values come from Y (n, d)
    Wq, Wk, Wv, Wo = init_projections(
        settings.d, settings.tau, settings.seed, settings.projection, dtype, kv_heads=settings.kv_heads
    )
    Q, K, V = project(H, Wq), project(Y, Wk), project(Y, Wv)  # (tau, m, dk), (G, n, dk), (G, n, dk)
    Q, K, V = ablate.apply(Q, K, V, settings)  # no-op unless --ablate
    scale = resolve_scale(settings.scale, settings.d_k)
    mask = build_mask(m, n, causal=settings.causal, window=settings.window, dtype=dtype)
    if padding is not None:
        mask = maskgrid.combine(mask, ~np.broadcast_to(np.asarray(padding, dtype=bool), (m, n)), dtype)
    if allowed is not None:
        mask = maskgrid.combine(mask, allowed, dtype)
    heads, weights = attention(Q, K, V, mask=mask, scale=scale, kernel=settings.kernel)
    kv = np.arange(settings.tau) // (settings.tau // settings.G)  # query head j reads key/value head j // (tau/G)
    scores = Q @ K[kv].transpose(0, 2, 1)  # (tau, m, dk) x (tau, dk, n) -> (tau, m, n)
    with np.errstate(over="ignore"):  # a huge --scale: scores saturate at the dtype's finite max, never inf
        np.multiply(scores, np.float64(scale), out=scores, casting="same_kind")
    big = np.finfo(dtype).max
    np.clip(scores, -big, big, out=scores)
    result = Result(
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
        mask=np.zeros((m, n), dtype=dtype) if mask is None else mask,
        weights=weights,
        heads=heads,
        Wo=Wo,
        output=combine(heads, Wo),
        scale=scale,
    )
    if context_tokens is not None:
        result.extra["key_labels"] = list(context_tokens.labels)
        result.extra["context"] = context_tokens
        result.extra["arrays"] = {"context_tokens": np.array(list(context_tokens.strings), dtype=str), "H_context": Y}
    if allowed is not None:
        result.extra["custom_allowed"] = np.asarray(allowed, dtype=bool)
    if padding is not None:
        result.extra["padding"] = np.asarray(padding, dtype=bool)
    if settings.ablate is not None:
        from dataclasses import replace

        intact = run(
            text,
            replace(settings, ablate=None),
            tokens=tokens,
            max_memory=max_memory,
            context_tokens=context_tokens,
            allowed=allowed,
            padding=padding,
        )
        result.extra["ablation"] = ablate.report(intact, result)
        result.extra.setdefault("json", {})["ablation"] = result.extra["ablation"]
    return result
