"""Per-head numbers that describe a weights matrix alpha (m x n): entropy, peak weight, attention distance."""

from __future__ import annotations

import numpy as np


def row_entropy(weights):  # [..., m, n] -> [..., m]: -sum_j alpha_ij log alpha_ij, in nats
    w = np.asarray(weights, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(w > 0, w * np.log(np.where(w > 0, w, 1.0)), 0.0)
    return -terms.sum(axis=-1)


def attention_distance(weights, key_offset: int = 0, positions=None):  # [..., m, n] -> [..., m]: sum_j alpha_ij |i - j|
    """positions: the query positions of the rows (default 0..m-1; --rows keeps some of them)."""
    m, n = weights.shape[-2:]
    i = (np.arange(m) if positions is None else np.asarray(positions))[:, None]
    j = np.arange(n)[None, :] + key_offset
    return (np.asarray(weights, dtype=np.float64) * np.abs(i - j)).sum(axis=-1)


def head_summary(weights, live_rows=None, cross: bool = False, positions=None):  # [tau, m, n] -> one dict a head
    """Mean over queries (rows with at least one allowed key) of entropy, row max and distance.

    cross: keys come from another text (cross-attention), so distance and self share mean nothing (nan),
    even when m == n. positions: the rows' query positions among the n keys (--rows; default 0..m-1)."""
    tau, m, n = weights.shape
    same = (m == n or positions is not None) and not cross
    at = np.arange(m) if positions is None else np.asarray(positions)
    live = np.ones(m, dtype=bool) if live_rows is None else live_rows
    entropy = row_entropy(weights)
    peak = weights.max(axis=-1) if n else np.zeros((tau, m))
    distance = attention_distance(weights, positions=at) if same else np.full((tau, m), np.nan)
    rows = []
    for j in range(tau):
        rows.append(
            {
                "head": j,
                "entropy": float(entropy[j, live].mean()) if live.any() else 0.0,
                "max_weight": float(peak[j, live].mean()) if live.any() else 0.0,
                "mean_distance": float(distance[j, live].mean()) if live.any() else 0.0,
                "self_share": float(weights[j][np.arange(m), at][live].mean())
                if same and live.any()
                else (0.0 if same else np.nan),
            }
        )
    return rows


def band_summary(band, heads) -> list[dict]:  # [tau, m, n_c] -> one dict per head in `heads`
    """The head summary of a band (see core.band): distance i - key of slot t is n_c - 1 - t; self is t = n_c - 1."""
    n_c = band.shape[-1]
    offsets = np.arange(n_c - 1, -1, -1, dtype=np.float64)  # distance i - key of each band slot
    rows = []
    for j in heads:
        b = band[j]
        rows.append({"head": j, "entropy": float(row_entropy(b).mean()), "max_weight": float(b.max(-1).mean()),
                     "mean_distance": float((b @ offsets).mean()), "self_share": float(b[:, -1].mean())})  # fmt: skip
    return rows


def strongest_links(band, keys, head: int, k: int = 8) -> list[tuple[int, int, float]]:
    """The k largest band weights of a head from a query to another token: (query, key, weight)."""
    b = band[head].astype(np.float64)
    b = np.where(keys >= 0, b, -1.0)
    b[:, -1] = -1.0  # leave out each token's weight on itself
    flat = np.argpartition(b.ravel(), -k)[-k:] if b.size > k else np.arange(b.size)
    flat = flat[np.argsort(-b.ravel()[flat])]
    i, t = np.unravel_index(flat, b.shape)
    return [(int(a), int(keys[a, c]), float(b[a, c])) for a, c in zip(i, t, strict=True) if b[a, c] >= 0]


def top_indices(x, k: int):  # [..., n] -> [..., min(k, n)]: the k largest of each row, largest first
    """What a stable argsort of -x keeps (ties go to the lower index), in O(n) a row instead of O(n log n): only
    the entries at least as large as the k-th largest (np.partition finds it) are sorted. A 49,152-entry vocabulary
    took 7.7 ms a step to argsort."""
    x = np.asarray(x)
    n = x.shape[-1]
    if k >= n or k <= 0:
        return np.argsort(-x, axis=-1, kind="stable")[..., : max(k, 0)]
    rows = x.reshape(-1, n)
    kth = np.partition(rows, n - k, axis=-1)[:, n - k]
    out = np.empty((rows.shape[0], k), dtype=np.intp)
    for i, (row, t) in enumerate(zip(rows, kth, strict=True)):
        if np.isnan(t) or np.isnan(row).any():  # NaN sorts last, past -inf: the stable argsort itself
            out[i] = np.argsort(-row, kind="stable")[:k]
            continue
        candidates = np.flatnonzero(row >= t)  # k of them, or more when the k-th value is tied
        out[i] = candidates[np.lexsort((candidates, -row[candidates]))[:k]]
    return out.reshape(*x.shape[:-1], k)
