"""What `qkv scan` measures per text, layer and head: the scores of `qkv heads` (core.roles, core.detectors) for one
text at a time, and the mass on named tokens (--to).

Each score is the value `qkv heads TEXT --model M --format json` gives for that text (the same function on the same
weights); `to_[SEP]` is Clark et al.'s (2019) "attention to [SEP]": the weight a row puts on the keys whose token is
[SEP], averaged over the head's live query rows. NumPy only.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass

import numpy as np

from qkv_cli.core.detectors import MEASURES
from qkv_cli.core.detectors import NAMES as DETECTORS
from qkv_cli.core.roles import METRICS, layer_head_stats
from qkv_cli.errors import QkvError

SCORES = (*METRICS, *DETECTORS)  # the names of `qkv heads --format json`
SINK_SHARE = "sink_share"  # a model with learned sinks (gpt-oss) adds it, as qkv heads does
TO_PREFIX = "to_"


@dataclass(frozen=True)
class Measures:
    """Which scores a scan keeps (names of SCORES), the token classes of --to, and the detectors' options."""

    scores: tuple[str, ...] = SCORES
    to: tuple[str, ...] = ()
    measure: str = "mul"
    exclude_first: bool = False
    exclude_current: bool = False

    def __post_init__(self):
        if self.measure not in MEASURES:
            raise QkvError(f"unknown detector measure {self.measure!r}: choose one of {', '.join(MEASURES)}")
        if not self.scores and not self.to:
            raise QkvError("nothing to measure: give --detectors NAMES or --to TOKENS")

    @property
    def columns(self) -> tuple[str, ...]:
        return (*self.scores, *(TO_PREFIX + t for t in self.to))

    @property
    def options(self) -> dict:
        return {"measure": self.measure, "exclude_first": self.exclude_first, "exclude_current": self.exclude_current}


def pick_scores(names) -> tuple[str, ...]:
    """--detectors "previous_token,induction" (or a list): the scores kept, in the order given; a typo is an
    error that suggests the nearest name."""
    if names is None:
        return SCORES
    pieces = names.split(",") if isinstance(names, str) else list(names)
    chosen = []
    for piece in (str(p).strip() for p in pieces):
        if not piece:
            continue
        if piece not in SCORES:
            near = difflib.get_close_matches(piece, SCORES, n=1)
            hint = f"did you mean {near[0]!r}? " if near else ""
            raise QkvError(f"--detectors: unknown score {piece!r}: {hint}choose from {', '.join(SCORES)}")
        if piece not in chosen:
            chosen.append(piece)
    if not chosen:
        raise QkvError(f"--detectors is empty: give a comma list of {', '.join(SCORES)}")
    return tuple(chosen)


def parse_to(value) -> tuple[str, ...]:
    """--to "[CLS],[SEP],.,,": the token classes, comma separated; two commas in a row stand for the comma token."""
    if value is None:
        return ()
    if not isinstance(value, str):
        value = ",".join(value)
    pieces, out, i = value.split(","), [], 0
    while i < len(pieces):
        piece = pieces[i].strip()
        if piece:
            out.append(piece)
        elif i + 1 < len(pieces) and not pieces[i + 1].strip():  # ",," : the comma itself
            out.append(",")
            i += 1
        i += 1
    if not out:
        raise QkvError(f"--to {value!r} names no token: give e.g. '[CLS],[SEP],.,,' (two commas: the comma)")
    return tuple(dict.fromkeys(out))


def token_key(label: str) -> str:
    """A token as --to matches it: its label without the space markers of BPE (Ġ) and SentencePiece (▁)."""
    return str(label).replace("Ġ", "").replace("▁", "").strip()


def mass_on(attentions, labels, to: tuple[str, ...]) -> np.ndarray:
    """[L, tau, m, m] weights, m labels -> [len(to), L, tau]: the mean over live rows of the weight on each class."""
    w = np.asarray(attentions, dtype=np.float64)
    keys = [token_key(t) for t in labels]
    live = w.sum(axis=-1) > 0  # (L, tau, m)
    rows = np.maximum(live.sum(axis=-1), 1)
    out = np.zeros((len(to), *w.shape[:2]))
    for c, name in enumerate(to):
        on = np.array([k == name for k in keys], dtype=np.float64)  # (m,)
        out[c] = ((w @ on) * live).sum(axis=-1) / rows  # (L, tau, m) -> (L, tau)
    return out


def text_scores(result, measures: Measures) -> dict[str, np.ndarray]:
    """One text's MODEL Result -> {column: [L * tau] values}, rows ordered layer by layer, head by head."""
    allowed = getattr(result, "allowed", None)  # random weights: the mask (a checkpoint's run has none)
    stats = layer_head_stats([result.attentions], None if allowed is None else [allowed], tokens_list=[result.ids],
                             labels_list=[result.labels], **measures.options)  # fmt: skip
    flat = [s for row in stats for s in row]
    out = {name: np.array([s[name] for s in flat], dtype=np.float64) for name in measures.scores}
    if result.sinks is not None:  # gpt-oss: the share of a row its learned sink took, as qkv heads shows it
        out[SINK_SHARE] = np.asarray(result.sinks, dtype=np.float64).mean(axis=-1).ravel()
    if measures.to:
        mass = mass_on(result.attentions, result.labels, measures.to)
        for c, name in enumerate(measures.to):
            out[TO_PREFIX + name] = mass[c].ravel()
    return out
