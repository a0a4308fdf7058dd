"""The Mask of Softmax(Q K^T / sqrt(d_k) + Mask): one registry entry per rule, combined cell by cell.

Query positions are i = 0..m-1, key positions t = 0..n-1 (n = m in self-attention). Each rule says which cells
it removes; a cell may attend (Mask 0) only if no active rule removes it (else Mask -inf). The same entry gives
the additive mask the kernels add, the "removed by" grid that `qkv mask` draws, the rule's letter, its help text
and the MaskSpec field that turns it on. A new mask kind is one function and one entry in RULES.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from qkv_cli.core.settings import check_chunk, check_window
from qkv_cli.errors import QkvError


@dataclass(frozen=True)
class MaskSpec:
    """Which rules are on. padding: (n,) bool, True = pad key; custom: (m, n) bool, True = may attend."""

    causal: bool = False
    window: int | None = None  # n_c; a window implies causal
    chunk: int | None = None  # n_ch; chunked attention (Llama 4) implies causal
    padding: np.ndarray | None = None
    custom: np.ndarray | None = None

    def __post_init__(self):
        if self.window is not None:
            check_window(self.window)
        if self.chunk is not None:
            check_chunk(self.chunk)

    @property
    def is_causal(self) -> bool:
        return self.causal or self.window is not None or self.chunk is not None

    @property
    def key(self) -> tuple:
        """What tells two layers' position rules apart (padding and custom grids are per run, not per layer)."""
        return (self.is_causal, self.window, self.chunk)


def _positions(m, n, offset):  # -> ([m, 1] query positions, [1, n] key positions)
    return np.arange(offset, offset + m)[:, None], np.arange(n)[None, :]


def _causal(m, n, spec, offset=0):  # V_<=i: key t after query i is removed
    i, t = _positions(m, n, offset)
    return t > i


def _window(m, n, spec, offset=0):  # V_[i-n_c+1, i]: key t older than the n_c most recent is removed
    i, t = _positions(m, n, offset)
    return t <= i - min(spec.window, offset + m)  # n_c beyond the text removes nothing (and cannot overflow)


def _chunk(m, n, spec, offset=0):  # key t in an earlier chunk of n_ch positions than query i is removed
    i, t = _positions(m, n, offset)
    return t // spec.chunk < i // spec.chunk  # a later chunk is the future: the causal rule's


def _padding(m, n, spec, offset=0):  # key t is a pad token
    pad = np.asarray(spec.padding, dtype=bool)
    if pad.shape != (n,):
        raise QkvError(f"padding must mark each of the n={n} keys, got shape {pad.shape}")
    return np.broadcast_to(pad[None, :], (m, n))


def _custom(m, n, spec, offset=0):  # the --mask-file grid says no
    check_shape(spec.custom, m, n)
    return ~np.asarray(spec.custom, dtype=bool)


@dataclass(frozen=True)
class MaskRule:
    name: str
    letter: str  # its mark in `qkv mask`
    help: str  # what a removed cell means
    option: str  # the command-line option that turns it on
    active: Callable[[MaskSpec], bool]
    removed: Callable  # (m, n, spec, offset) -> (m, n) bool, True where the rule removes (i, t)


RULES = {
    rule.name: rule
    for rule in (
        MaskRule("causal", "C", "key after the query (t > i)", "--causal", lambda s: s.is_causal, _causal),
        MaskRule("window", "W", "key older than the n_c most recent (t <= i - n_c)", "--window",
                 lambda s: s.window is not None, _window),
        MaskRule("chunk", "K", "key in an earlier chunk of n_ch tokens (t // n_ch < i // n_ch)", "--chunk",
                 lambda s: s.chunk is not None, _chunk),
        MaskRule("padding", "P", "key is a pad token", "--batch / --pad-to", lambda s: s.padding is not None,
                 _padding),
        MaskRule("custom", "X", "--mask-file says no", "--mask-file", lambda s: s.custom is not None, _custom),
    )
}  # fmt: skip


def rule_grids(spec: MaskSpec, m: int, n: int | None = None, offset: int = 0) -> dict:  # -> {rule: [m, n] bool}
    """One boolean grid per active rule (True = removed), in the order of RULES (the first names a cell in
    `qkv mask`). offset: query i sits at position offset + i (the new tokens after a KV cache's)."""
    n = m if n is None else n
    return {name: rule.removed(m, n, spec, offset) for name, rule in RULES.items() if rule.active(spec)}


def allowed_grid(grids: dict, m: int, n: int):  # -> [m, n] bool: True = may attend (no rule removes it)
    allowed = np.ones((m, n), dtype=bool)
    for removed in grids.values():
        allowed &= ~removed
    return allowed


def allowed_to_additive(allowed, dtype=np.float64):  # [m, n] bool -> [m, n] 0 / -inf
    """True = may attend -> 0; False -> -inf."""
    mask = np.zeros(np.shape(allowed), dtype=dtype)
    mask[~np.asarray(allowed, dtype=bool)] = -np.inf
    return mask


def additive(spec: MaskSpec, m: int, n: int | None = None, dtype=np.float64, offset: int = 0):  # -> [m, n] or None
    """The additive Mask of the active rules (0 / -inf); None when no rule is active (every query sees every key)."""
    n = m if n is None else n
    grids = rule_grids(spec, m, n, offset)
    return allowed_to_additive(allowed_grid(grids, m, n), dtype) if grids else None


def removed_by(grids: dict, m: int, n: int) -> list[list[list[str]]]:
    """For each cell, the rules that remove it, in the order of RULES (an empty list = may attend)."""
    out = [[[] for _ in range(n)] for _ in range(m)]
    for rule in RULES:
        if rule in grids:
            for i, t in zip(*np.nonzero(grids[rule]), strict=True):
                out[i][t].append(rule)
    return out


def check_shape(allowed, m: int, n: int, source: str = "the custom mask") -> None:
    shape = np.shape(allowed)
    if shape != (m, n):
        what = f"m={m} queries x n={n} keys" if m != n else f"m={m} x m={m} (the text has {m} tokens)"
        raise QkvError(f"{source} has shape {' x '.join(map(str, shape))} but this run needs {what}")
