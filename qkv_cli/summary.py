"""Per-head numbers that describe a weights matrix alpha (m x n): entropy, peak weight, attention distance."""

from __future__ import annotations

import numpy as np


def row_entropy(weights):  # [..., m, n] -> [..., m]: -sum_j alpha_ij log alpha_ij, in nats
    w = np.asarray(weights, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(w > 0, w * np.log(np.where(w > 0, w, 1.0)), 0.0)
    return -terms.sum(axis=-1)


def attention_distance(weights, key_offset: int = 0):  # [..., m, n] -> [..., m]: sum_j alpha_ij |i - j|
    m, n = weights.shape[-2:]
    i = np.arange(m)[:, None]
    j = np.arange(n)[None, :] + key_offset
    return (np.asarray(weights, dtype=np.float64) * np.abs(i - j)).sum(axis=-1)


def head_summary(weights, live_rows=None, cross: bool = False):  # [tau, m, n] -> list of dicts, one per head
    """Mean over queries (rows with at least one allowed key) of entropy, row max and distance.

    cross: keys come from another text (cross-attention), so distance and self share mean nothing (nan),
    even when m == n."""
    tau, m, n = weights.shape
    same = m == n and not cross
    live = np.ones(m, dtype=bool) if live_rows is None else live_rows
    entropy = row_entropy(weights)
    peak = weights.max(axis=-1) if n else np.zeros((tau, m))
    distance = attention_distance(weights) if same else np.full((tau, m), np.nan)
    rows = []
    for j in range(tau):
        rows.append(
            {
                "head": j,
                "entropy": float(entropy[j, live].mean()) if live.any() else 0.0,
                "max_weight": float(peak[j, live].mean()) if live.any() else 0.0,
                "mean_distance": float(distance[j, live].mean()) if live.any() else 0.0,
                "self_share": float(np.diagonal(weights[j])[live].mean())
                if same and live.any()
                else (0.0 if same else np.nan),
            }
        )
    return rows
