"""Head roles: what each head mostly looks at, from its weights alpha (m x m, self-attention).

Per head, averaged over the live query rows of every sentence (a row with every key masked is skipped):

- entropy: -sum_t alpha_it log alpha_it (nats); norm_entropy divides by log(allowed keys of row i), so
  0 = one key, 1 = uniform over the keys the row may see (rows with one allowed key count as 0);
- max_weight: the largest weight of the row;
- mean_distance: sum_t alpha_it |i - t|;
- self: alpha_ii; previous: alpha_i,i-1; first: alpha_i0 (the first token, or [CLS]); previous and first are
  averaged over rows i >= 1, where they differ from self;
- local: the weight within LOCAL_RADIUS positions, sum over |i - t| <= 2 of alpha_it;
- softmax_grad: sum_t alpha_it (1 - alpha_it), the trace of the softmax Jacobian diag(alpha) - alpha alpha^T:
  near 0 when the softmax saturates (one weight near 1), so almost no gradient flows back into the scores.

Role labels, first rule that holds (THRESHOLDS):

- previous-token: previous >= 0.5;  self: self >= 0.5;  first-token sink: first >= 0.5
  (when more than one holds, the largest share wins);
- local: local >= 0.8 (and not one of the above);
- broad: norm_entropy >= 0.8 (weight spread over most allowed keys);
- mixed: none of the above.

`layer_head_stats` takes a list of weight tensors (L, tau, m, m), one per sentence, and returns an L x tau grid
of statistics: the hook for checkpoints with several layers. NumPy only.
"""

from __future__ import annotations

import numpy as np

from qkv_cli.core.stats import row_entropy
from qkv_cli.errors import QkvError

LOCAL_RADIUS = 2
THRESHOLDS = {"previous": 0.5, "self": 0.5, "first": 0.5, "local": 0.8, "broad": 0.8}
ROLES = ("previous-token", "self", "first-token sink", "local", "broad", "mixed")
SHARE_ROLES = (("previous", "previous-token"), ("self", "self"), ("first", "first-token sink"))
METRICS = (
    "entropy",
    "norm_entropy",
    "max_weight",
    "mean_distance",
    "self",
    "previous",
    "first",
    "local",
    "softmax_grad",
)


def role(stats: dict) -> str:
    """The role label of one head's statistics (see THRESHOLDS)."""
    shares = [(stats[key], label) for key, label in SHARE_ROLES if stats[key] >= THRESHOLDS[key]]
    if shares:
        return max(shares, key=lambda x: x[0])[1]
    if stats["local"] >= THRESHOLDS["local"]:
        return "local"
    if stats["norm_entropy"] >= THRESHOLDS["broad"]:
        return "broad"
    return "mixed"


def _sums(weights, allowed=None):  # [tau, m, m], [m, m] bool -> (sums over rows [tau], live rows, live rows i >= 1)
    w = np.asarray(weights, dtype=np.float64)
    tau, m, n = w.shape
    if m != n:
        raise QkvError(f"head roles need self-attention (m = n), got weights of {m} queries x {n} keys: drop --context")
    live = w.sum(axis=-1) > 0  # [tau, m]: rows with at least one allowed key
    if allowed is None:  # without the mask, a key with weight > 0 counts as allowed
        allowed = w > 0
    else:
        allowed = np.broadcast_to(np.asarray(allowed, dtype=bool)[None], w.shape)
    ent = row_entropy(w)
    with np.errstate(divide="ignore", invalid="ignore"):
        width = np.log(np.maximum(allowed.sum(axis=-1), 1))
        norm = np.where(width > 0, ent / np.where(width > 0, width, 1.0), 0.0)
    i = np.arange(m)[:, None]
    t = np.arange(m)[None, :]
    dist = (w * np.abs(i - t)).sum(axis=-1)
    local = (w * (np.abs(i - t) <= LOCAL_RADIUS)).sum(axis=-1)
    diag = np.diagonal(w, axis1=1, axis2=2)
    prev = np.concatenate([np.zeros((tau, 1)), np.diagonal(w, offset=-1, axis1=1, axis2=2)], axis=1)
    first = w[:, :, 0]
    grad = (w * (1 - w)).sum(axis=-1)
    later = live & (np.arange(m) >= 1)[None, :]
    per_row = {
        "entropy": ent,
        "norm_entropy": norm,
        "max_weight": w.max(axis=-1),
        "mean_distance": dist,
        "self": diag,
        "local": local,
        "softmax_grad": grad,
    }
    sums = {k: (v * live).sum(axis=-1) for k, v in per_row.items()}
    sums["previous"] = (prev * later).sum(axis=-1)
    sums["first"] = (first * later).sum(axis=-1)
    return sums, live.sum(axis=-1), later.sum(axis=-1)


def layer_head_stats(weights_list, allowed_list=None) -> list[list[dict]]:
    """weights_list: one array (L, tau, m, m) per sentence (m may differ); allowed_list: optionally one (m, m)
    bool grid per sentence (True = may attend; else keys with weight > 0 count as allowed).
    Returns stats[layer][head]: a dict of METRICS averaged over every live query row of every sentence,
    plus "rows" (rows counted) and "role"."""
    if not weights_list:
        raise QkvError("no sentences to analyse: give TEXT or a --file with at least one non-empty line")
    shapes = {tuple(np.shape(w)[:2]) for w in weights_list}
    if len(shapes) != 1 or len(next(iter(shapes))) != 2:
        raise QkvError(f"every weight tensor must be (L, tau, m, m) with the same L and tau, got {sorted(shapes)}")
    L, tau = next(iter(shapes))
    totals = [[None] * tau for _ in range(L)]
    allowed_list = [None] * len(weights_list) if allowed_list is None else allowed_list
    for w, allowed in zip(weights_list, allowed_list, strict=True):
        for layer in range(L):
            sums, rows, later = _sums(w[layer], allowed)
            for j in range(tau):
                acc = totals[layer][j] or {"sums": dict.fromkeys(METRICS, 0.0), "rows": 0, "later": 0}
                for k in METRICS:
                    acc["sums"][k] += float(sums[k][j])
                acc["rows"] += int(rows[j])
                acc["later"] += int(later[j])
                totals[layer][j] = acc
    out = []
    for layer in range(L):
        row = []
        for j in range(tau):
            acc = totals[layer][j]
            stats = {"layer": layer, "head": j}
            for k in METRICS:
                count = acc["later"] if k in ("previous", "first") else acc["rows"]
                stats[k] = acc["sums"][k] / count if count else 0.0
            stats["rows"] = acc["rows"]
            stats["role"] = role(stats)
            row.append(stats)
        out.append(row)
    return out


def head_stats(weights_list, allowed_list=None) -> list[dict]:
    """One layer: weights_list holds (tau, m, m) arrays, one per sentence; returns one dict per head."""
    return layer_head_stats([np.asarray(w)[None] for w in weights_list], allowed_list)[0]
