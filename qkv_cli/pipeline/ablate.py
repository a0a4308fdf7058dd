"""Ablation: replace the output of one projection (Q = H W^q, K = H W^k or V = H W^v) and see what changes.

Q and K only enter the weights alpha = Softmax(Q K^T * scale + Mask); V only enters the output alpha V.
So ablating V leaves every weight unchanged while the output changes: weights that "look right" say nothing
about whether the values carry meaning.

- zeros: the matrix becomes 0 (Q or K = 0 gives uniform weights over the allowed keys);
- noise: Gaussian noise with the matrix's own standard deviation, seeded by --seed (a stream of its own).
"""

from __future__ import annotations

import numpy as np

COMPARED = ("Q", "K", "V", "scores", "weights", "heads", "output")


def replacement(X, how: str, seed: int):  # [h, m, dk] -> [h, m, dk] in X's dtype
    if how == "zeros":
        return np.zeros_like(X)
    rng = np.random.default_rng([seed, 2])
    std = float(np.std(X)) if X.size else 0.0
    return (rng.standard_normal(X.shape) * std).astype(X.dtype)


def apply(Q, K, V, settings):  # -> (Q, K, V) with the one named by settings.ablate replaced
    """No-op unless settings.ablate is q, k or v."""
    which = settings.ablate
    if which is None:
        return Q, K, V
    if which == "q":
        return replacement(Q, settings.ablate_with, settings.seed), K, V
    if which == "k":
        return Q, replacement(K, settings.ablate_with, settings.seed), V
    return Q, K, replacement(V, settings.ablate_with, settings.seed)


def max_change(a, b) -> float:
    """max |a - b|, with -inf == -inf counting as no change (masked cells)."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    same = (a == b) | (np.isnan(a) & np.isnan(b))
    with np.errstate(invalid="ignore"):  # inf - inf where both are masked: `same` already covers it
        diff = np.where(same, 0.0, np.abs(a - b))
    return float(np.nan_to_num(diff, nan=np.inf).max()) if diff.size else 0.0


def report(intact, ablated) -> dict:
    """What the ablation changed: max |difference| per matrix between the intact and the ablated run."""
    s = ablated.settings
    return {
        "target": s.ablate.upper(),
        "with": s.ablate_with,
        "max_change": {name: max_change(getattr(intact, name), getattr(ablated, name)) for name in COMPARED},
    }
