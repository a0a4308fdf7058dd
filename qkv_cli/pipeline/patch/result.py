"""What a patching run found (pipeline.patch): every patch's recovery, per --what a (layer, position) or (layer,
head) grid, with the raw metric of both runs and of each patch."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from qkv_cli.pipeline.patch.hooks import BY_POSITION


@dataclass(frozen=True)
class Patching:
    what: tuple[str, ...]  # in pipeline.patch.hooks.WHAT's order
    recovery: dict  # what -> (L, m) for resid/attn/mlp, (L, tau) for heads/q/pattern, (L, G) for k/v
    metric_values: dict  # what -> the raw metric of each patch, same shapes
    metric: str  # logit-diff, prob or kl
    direction: str  # denoise (clean into corrupted) or noise (corrupted into clean)
    metric_clean: float
    metric_corrupted: float
    answer: tuple[int, str]  # (id, label)
    wrong: tuple[int, str] | None
    clean: str
    corrupted: str
    labels_clean: tuple[str, ...]
    labels_corrupted: tuple[str, ...]
    model: str
    n_layers: int
    tau: int
    G: int
    answer_position: tuple[int, int]  # where the metric is read: (clean, corrupted) positions (a decoder's)
    attention: tuple | None = None  # (clean, corrupted) weights, each (L, tau, m, m), when asked for (the page)
    side: str | None = None  # an encoder-decoder's patched attention: encoder, decoder or cross (pipeline.patch.encdec)
    target: str | None = None  # an encoder-decoder's teacher-forced target (the decoder's tokens are the labels)
    sources: tuple | None = None  # an encoder-decoder's (clean, corrupted) source labels
    decoder: tuple | None = None  # an encoder-decoder's decoder tokens: its start token, then the target's
    pairs: list | None = None  # prompts of two lengths: [clean position, corrupted position] per column (pairs.py)

    @property
    def m(self) -> int:
        return len(self.labels_clean)

    def paired(self) -> list[tuple[int, int]]:
        """(clean position, corrupted position) of each column of a position grid: (i, i) for prompts of one length."""
        return [(i, i) for i in range(self.m)] if self.pairs is None else [(int(a), int(b)) for a, b in self.pairs]

    def differing(self) -> list[int]:
        """The positions whose tokens differ between two prompts of one length (an encoder-decoder's: its two
        sources; two lengths: the clean prompt's unpaired positions)."""
        if self.sources is not None:
            a, b = self.sources
            return [i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y]
        if self.pairs is not None:
            kept = {a for a, _ in self.paired()}
            return [i for i in range(self.m) if i not in kept]
        return [i for i, (a, b) in enumerate(zip(self.labels_clean, self.labels_corrupted, strict=True)) if a != b]

    def column_labels(self, what: str) -> list[str]:
        """The columns of `what`'s grid: "i token" (the clean prompt's, "clean/corrupted" where they differ; a pair
        of two positions "i/j token"), "Hj" for a head, "KVg" for a key/value head."""
        if what in BY_POSITION:
            out = []
            for i, j in self.paired():
                a, b = self.labels_clean[i], self.labels_corrupted[j]
                out.append(f"{i if i == j else f'{i}/{j}'} {a if a == b else f'{a}/{b}'}")
            return out
        if what in ("k", "v") and self.side is None:  # an encoder-decoder's heads have their own keys and values
            return [f"KV{g}" for g in range(self.G)]
        return [f"H{j}" for j in range(self.tau)]

    def index_name(self, what: str) -> str:
        grouped = what in ("k", "v") and self.side is None  # an encoder-decoder's heads: their own keys, values
        return "position" if what in BY_POSITION else ("kv_head" if grouped else "head")

    def top(self, n: int | None = 10) -> list[dict]:
        """The patches that recover most (denoise) or destroy most (noise: the lowest recovery), over every --what:
        what, layer, position or head, its label, recovery and metric."""
        rows = []
        for w in self.what:
            names = self.column_labels(w)
            for l, i in np.ndindex(self.recovery[w].shape):
                rows.append({"what": w, "layer": int(l), self.index_name(w): int(i), "index": int(i),
                             "label": names[i], "recovery": float(self.recovery[w][l, i]),
                             "metric": float(self.metric_values[w][l, i])})  # fmt: skip
        sign = -1.0 if self.direction == "denoise" else 1.0
        rows.sort(key=lambda r: (sign * r["recovery"], r["layer"], r["index"]))
        return rows if n is None else rows[:n]

    def arrays(self) -> dict:
        """The export: recovery_<what> and metric_<what> grids, metric_clean, metric_corrupted, labels."""
        out = {f"recovery_{w}": self.recovery[w] for w in self.what}
        out |= {f"metric_{w}": self.metric_values[w] for w in self.what}
        out |= {f"labels_{w}": np.array(self.column_labels(w)) for w in self.what}
        out |= {"metric_clean": np.float64(self.metric_clean), "metric_corrupted": np.float64(self.metric_corrupted)}
        out |= {"labels_clean": np.array(self.labels_clean), "labels_corrupted": np.array(self.labels_corrupted)}
        if self.side is not None:  # an encoder-decoder: labels_* are the patched stack's positions; the sources too
            out |= {"sources_clean": np.array(self.sources[0]), "sources_corrupted": np.array(self.sources[1])}
        out |= {"pairs": np.array(self.paired(), dtype=np.int64).reshape(-1, 2),
                "answer_position": np.array(self.answer_position, dtype=np.int64)}  # fmt: skip
        return out

    def summary(self) -> dict:
        """JSON: every recovery (what -> layer -> columns), the metric of both runs and the labels."""
        return {
            "model": self.model, "clean": self.clean, "corrupted": self.corrupted, "metric": self.metric,
            "direction": self.direction, "answer": self.answer[1], "answer_id": self.answer[0],
            "wrong": None if self.wrong is None else self.wrong[1],
            "wrong_id": None if self.wrong is None else self.wrong[0],
            "metric_clean": self.metric_clean, "metric_corrupted": self.metric_corrupted,
            "answer_position": {"clean": self.answer_position[0], "corrupted": self.answer_position[1]},
            "pairs": [list(p) for p in self.paired()],
            "labels": {"clean": list(self.labels_clean), "corrupted": list(self.labels_corrupted),
                       **{w: self.column_labels(w) for w in self.what}},
            "recovery": {w: self.recovery[w].tolist() for w in self.what},
            "metric_values": {w: self.metric_values[w].tolist() for w in self.what},
        } | self.encdec()  # fmt: skip

    def encdec(self) -> dict:
        """An encoder-decoder's extra fields: the patched attention, the target and both sources' labels."""
        if self.side is None:
            return {}
        return {"attention": self.side, "target": self.target, "decoder": list(self.decoder),
                "sources": {"clean": list(self.sources[0]), "corrupted": list(self.sources[1])}}  # fmt: skip
