"""Head roles: what each head mostly looks at, from its weights alpha (m x m, self-attention).

Per head, averaged over the live query rows of every sentence (a row with every key masked is skipped):

- entropy: -sum_t alpha_it log alpha_it (nats); norm_entropy divides by log(allowed keys of row i), so
  0 = one key, 1 = uniform over the keys the row may see (rows with one allowed key count as 0);
- max_weight: the largest weight of the row;
- mean_distance: sum_t alpha_it |i - t|;
- self: alpha_ii; previous: alpha_i,i-1; first: alpha_i0 (the first token, or [CLS]); previous and first are
  averaged over rows i >= 1, where they differ from self;
- next: alpha_i,i+1, the token after the query, averaged over rows i <= m-2 (0 under a causal mask: it needs a
  bidirectional model);
- sink: the share on one fixed later token t* >= 1 ([SEP], the last token, a full stop ...): per sentence and head,
  t* is the key with the most weight from the other rows, and the share is alpha_i,t* averaged over rows i != t*;
  sink_token is t*'s label (the most frequent one over the sentences);
- local: the weight within LOCAL_RADIUS positions, sum over |i - t| <= 2 of alpha_it;
- softmax_grad: sum_t alpha_it (1 - alpha_it), the trace of the softmax Jacobian diag(alpha) - alpha alpha^T:
  near 0 when the softmax saturates (one weight near 1), so almost no gradient flows back into the scores;
- previous_token, duplicate_token, induction: TransformerLens' detector scores (core.detectors), per sentence,
  then the mean over sentences.

Role labels, first rule that holds (THRESHOLDS):

- induction: induction >= 0.3, else duplicate-token: duplicate_token >= 0.3 (the "mul" scores, whatever measure
  is shown; a perfect head scores the share of rows that have a target, about 0.5 on `--induction-probe`);
- previous-token: previous >= 0.5;  self: self >= 0.5;  first-token: first >= 0.5;  next-token: next >= 0.5;
  sink: sink >= 0.5 (when more than one holds, the largest share wins);
- local: local >= 0.8 (and not one of the above);
- broad: norm_entropy >= 0.8 (weight spread over most allowed keys);
- mixed: none of the above.

`layer_head_stats` takes a list of weight tensors (L, tau, m, m), one per sentence, and returns an L x tau grid
of statistics: the hook for checkpoints with several layers. NumPy only.
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from qkv_cli.core.detectors import NAMES as DETECTORS
from qkv_cli.core.detectors import detector_scores
from qkv_cli.core.stats import row_entropy
from qkv_cli.errors import QkvError

LOCAL_RADIUS = 2
THRESHOLDS = {"previous": 0.5, "self": 0.5, "first": 0.5, "local": 0.8, "broad": 0.8, "next": 0.5, "sink": 0.5,
              "induction": 0.3, "duplicate_token": 0.3}  # fmt: skip
ROLES = ("induction", "duplicate-token", "previous-token", "self", "first-token", "next-token", "sink", "local",
         "broad", "mixed")  # fmt: skip
DETECTOR_ROLES = (("induction", "induction"), ("duplicate_token", "duplicate-token"))
SHARE_ROLES = (("previous", "previous-token"), ("self", "self"), ("first", "first-token"), ("next", "next-token"),
               ("sink", "sink"))  # fmt: skip
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
    "next",
    "sink",
)
COUNT = {"previous": "later", "first": "later", "next": "earlier", "sink": "sink"}  # the rows each is averaged over


def role(stats: dict, detectors: dict | None = None) -> str:
    """The role label of one head's statistics (see THRESHOLDS); detectors: the "mul" scores, if not in stats."""
    scores = stats if detectors is None else detectors
    for key, label in DETECTOR_ROLES:
        if scores.get(key, 0.0) >= THRESHOLDS[key]:
            return label
    shares = [(stats.get(key, 0.0), label) for key, label in SHARE_ROLES if stats.get(key, 0.0) >= THRESHOLDS[key]]
    if shares:
        return max(shares, key=lambda x: x[0])[1]
    if stats["local"] >= THRESHOLDS["local"]:
        return "local"
    if stats["norm_entropy"] >= THRESHOLDS["broad"]:
        return "broad"
    return "mixed"


def _sums(weights, allowed=None):  # [tau, m, m], [m, m] bool -> (sums over rows {metric: [tau]}, counts, sink keys)
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
    nxt = np.concatenate([np.diagonal(w, offset=1, axis1=1, axis2=2), np.zeros((tau, 1))], axis=1)
    first = w[:, :, 0]
    grad = (w * (1 - w)).sum(axis=-1)
    later = live & (np.arange(m) >= 1)[None, :]
    earlier = live & (np.arange(m) <= m - 2)[None, :]
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
    sums["next"] = (nxt * earlier).sum(axis=-1)
    counts = {"rows": live.sum(axis=-1), "later": later.sum(axis=-1), "earlier": earlier.sum(axis=-1)}
    sums["sink"], counts["sink"], sink_keys = _sink(w, live)
    return sums, counts, sink_keys


def _sink(w, live):  # [tau, m, m], [tau, m] -> ([tau] weight on t*, [tau] rows i != t*, [tau] t* (-1: none))
    tau, m, _ = w.shape
    if m < 2:
        return np.zeros(tau), np.zeros(tau, dtype=int), np.full(tau, -1)
    off = w * live[:, :, None] * (1 - np.eye(m))[None]  # the other rows' weight: a query on itself is not a sink
    column = off.sum(axis=1)[:, 1:]  # (tau, m - 1): keys 1..m-1
    key = column.argmax(axis=-1) + 1
    rows = live.sum(axis=-1) - live[np.arange(tau), key]
    return column[np.arange(tau), key - 1], rows, key


def layer_head_stats(weights_list, allowed_list=None, tokens_list=None, labels_list=None, measure: str = "mul",
                     exclude_first: bool = False, exclude_current: bool = False) -> list[list[dict]]:  # fmt: skip
    """weights_list: one array (L, tau, m, m) per sentence (m may differ); allowed_list: optionally one (m, m)
    bool grid per sentence (True = may attend; else keys with weight > 0 count as allowed); tokens_list: the
    token ids (or strings) of each sentence, for the duplicate and induction detectors (None: no repeats);
    labels_list: their labels, to name the sink; measure, exclude_first, exclude_current: the detectors' options.
    Returns stats[layer][head]: a dict of METRICS averaged over every live query row of every sentence, the
    detector scores (mean over sentences), "sink_token", "rows" (rows counted) and "role"."""
    if not weights_list:
        raise QkvError("no sentences to analyse: give TEXT or a --file with at least one non-empty line")
    shapes = {tuple(np.shape(w)[:2]) for w in weights_list}
    if len(shapes) != 1 or len(next(iter(shapes))) != 2:
        raise QkvError(f"every weight tensor must be (L, tau, m, m) with the same L and tau, got {sorted(shapes)}")
    L, tau = next(iter(shapes))
    k = len(weights_list)
    sums = {key: np.zeros((L, tau)) for key in METRICS}
    counts = {key: np.zeros((L, tau)) for key in ("rows", "later", "earlier", "sink")}
    scores = {f"{name}/{how}": np.zeros((L, tau)) for name in DETECTORS for how in {"mul", measure}}
    sinks = [[Counter() for _ in range(tau)] for _ in range(L)]
    allowed_list = [None] * k if allowed_list is None else allowed_list
    tokens_list = [None] * k if tokens_list is None else tokens_list
    labels_list = [None] * k if labels_list is None else labels_list
    for w, allowed, tokens, labels in zip(weights_list, allowed_list, tokens_list, labels_list, strict=True):
        for layer in range(L):
            s, c, keys = _sums(w[layer], allowed)
            for key in METRICS:
                sums[key][layer] += s[key]
            for key in counts:
                counts[key][layer] += c[key]
            for j, t in enumerate(keys):
                if t >= 0:
                    sinks[layer][j][str(labels[t]) if labels is not None else f"position {t}"] += 1
        for how in {"mul", measure}:
            for name, value in detector_scores(w, tokens, how, exclude_first, exclude_current).items():
                scores[f"{name}/{how}"] += value / k
    out = []
    for layer in range(L):
        row = []
        for j in range(tau):
            stats = {"layer": layer, "head": j}
            for key in METRICS:
                count = counts[COUNT.get(key, "rows")][layer, j]
                stats[key] = float(sums[key][layer, j] / count) if count else 0.0
            for name in DETECTORS:
                stats[name] = float(scores[f"{name}/{measure}"][layer, j])
            stats["sink_token"] = sinks[layer][j].most_common(1)[0][0] if sinks[layer][j] else ""
            stats["rows"] = int(counts["rows"][layer, j])
            stats["role"] = role(stats, {name: float(scores[f"{name}/mul"][layer, j]) for name in DETECTORS})
            row.append(stats)
        out.append(row)
    return out


def head_stats(weights_list, allowed_list=None, **detectors) -> list[dict]:
    """One layer: weights_list holds (tau, m, m) arrays, one per sentence; returns one dict per head."""
    return layer_head_stats([np.asarray(w)[None] for w in weights_list], allowed_list, **detectors)[0]
