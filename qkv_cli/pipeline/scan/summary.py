"""summary.json of a scan, computed from its shards one at a time (memory: one shard, whatever the corpus's size).

Per score, as layer x head grids over the texts scanned:

- mean, std (the sample standard deviation, ddof 1; 0 for one text), and ci95: the 95% interval of the mean,
  mean -/+ 1.96 std / sqrt(n) (normal approximation);
- holds: for a score with a role threshold (core.roles.THRESHOLDS: previous >= 0.5, induction >= 0.3 ...), the
  share of texts on which the head passes it;
- top: the 5 texts with the largest value, as [text_id, value] (ties: the smaller text_id first).

Beside them: how many records were read, texts scored and cut (--max-tokens), how many were unreadable and the
first LISTED of them (text_id, where, the problem).
Means and variances are merged shard by shard (Chan et al.'s pairwise update), so no column is held whole.
"""

from __future__ import annotations

import numpy as np

from qkv_cli.core.roles import THRESHOLDS
from qkv_cli.pipeline.scan.store import KEYS, arrow, shard_meta, shards

TOP = 5
LISTED = 1000  # unreadable records listed in summary.json (all are counted)
Z95 = 1.959963984540054  # the standard normal's 97.5% quantile


class Running:
    """n, mean, M2 and the top TOP (value, text_id) of each of H heads, merged block by block."""

    def __init__(self, H: int, threshold: float | None):
        self.n, self.mean, self.m2 = 0, np.zeros(H), np.zeros(H)
        self.threshold, self.hits = threshold, np.zeros(H)
        self.top_v, self.top_id = np.full((H, 0), -np.inf), np.zeros((H, 0), dtype=np.int64)

    def add(self, x, ids):  # x: (texts, H), ids: (texts,)
        nb = x.shape[0]
        if nb == 0:
            return
        mb = x.mean(axis=0)
        m2b = ((x - mb) ** 2).sum(axis=0)
        n = self.n + nb
        delta = mb - self.mean
        self.mean = self.mean + delta * nb / n
        self.m2 = self.m2 + m2b + delta**2 * self.n * nb / n
        self.n = n
        if self.threshold is not None:
            self.hits += (x >= self.threshold).sum(axis=0)
        v = np.concatenate([self.top_v, x.T], axis=1)  # (H, k + texts)
        t = np.concatenate([self.top_id, np.broadcast_to(ids, x.T.shape)], axis=1)
        order = np.lexsort((t, -v), axis=-1)[:, :TOP]
        self.top_v, self.top_id = np.take_along_axis(v, order, -1), np.take_along_axis(t, order, -1)

    def result(self, L: int, tau: int) -> dict:
        std = np.sqrt(self.m2 / (self.n - 1)) if self.n > 1 else np.zeros_like(self.mean)
        half = Z95 * std / np.sqrt(max(self.n, 1))

        def grid(a):
            return np.asarray(a, dtype=np.float64).reshape(L, tau).tolist()

        out = {"mean": grid(self.mean), "std": grid(std), "ci95_low": grid(self.mean - half),
               "ci95_high": grid(self.mean + half)}  # fmt: skip
        if self.threshold is not None:
            out["threshold"] = self.threshold
            out["holds"] = grid(self.hits / max(self.n, 1))
        top = [[[int(i), float(v)] for i, v in zip(ids, vals, strict=True) if np.isfinite(v)]
               for ids, vals in zip(self.top_id, self.top_v, strict=True)]  # fmt: skip
        out["top"] = [top[l * tau : (l + 1) * tau] for l in range(L)]
        return out


def summarize(out, manifest: dict) -> dict:
    """The summary of the scan in `out` (its shards as they are: call it once every shard is written)."""
    _, pq = arrow()
    L, tau = manifest["layers"], manifest["heads"]
    H = L * tau
    running: dict[str, Running] = {}
    problems, unreadable, cut, texts, records = [], 0, 0, 0, 0
    columns: list[str] = []
    for path in shards(out):
        meta = shard_meta(path)
        problems += meta["problems"][: max(0, LISTED - len(problems))]
        unreadable += len(meta["problems"])
        cut, texts, records = cut + meta["cut"], texts + meta["texts"], records + meta["records"]
        table = pq.read_table(path)
        if not columns:
            columns = [c for c in table.column_names if c not in KEYS]
        n = table.num_rows // H
        if n == 0:
            continue
        ids = table.column("text_id").to_numpy()[::H]
        for name in columns:
            if name not in running:
                running[name] = Running(H, THRESHOLDS.get(name))
            running[name].add(table.column(name).to_numpy().reshape(n, H), ids)
    return {
        "model": manifest["model"], "corpus": manifest["corpus"], "layers": L, "heads": tau,
        "records": records, "texts": texts, "cut": cut, "unreadable_count": unreadable, "unreadable": problems,
        "columns": columns, "scores": {name: r.result(L, tau) for name, r in running.items()},
    }  # fmt: skip


def top_heads(summary: dict, score: str, n: int = 5) -> list[dict]:
    """The n heads with the largest mean of `score`: layer, head, mean, std, holds (when it has a threshold)."""
    s = summary["scores"][score]
    mean = np.asarray(s["mean"])
    flat = sorted(((float(mean[l, j]), l, j) for l in range(mean.shape[0]) for j in range(mean.shape[1])),
                  key=lambda x: (-x[0], x[1], x[2]))  # fmt: skip
    out = []
    for value, l, j in flat[:n]:
        row = {"layer": l, "head": j, "mean": value, "std": s["std"][l][j], "top_text": s["top"][l][j][0][0]}
        if "holds" in s:
            row["holds"] = s["holds"][l][j]
        out.append(row)
    return out
