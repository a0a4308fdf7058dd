"""Which layers and which query rows a forward pass keeps: --layer L (0-based, -1 the last) and --rows A:B (a
Python slice over the query positions), checked against the model and the text with one-line errors."""

from __future__ import annotations

import numpy as np

from qkv_cli.errors import QkvError


def check_layer(index: int, n_layers: int) -> int:
    """A 0-based layer index (negative counts from the end) -> 0..L-1, or QkvError naming the valid range."""
    if isinstance(index, bool) or not isinstance(index, int | np.integer):
        raise QkvError(f"layer must be an integer, got {index!r}")
    if not -n_layers <= index < n_layers:
        raise QkvError(
            f"layer {index} does not exist: the model has {n_layers} layers (0..{n_layers - 1}, or -1 for the last)"
        )
    return int(index) % n_layers


def select_layers(layers, n_layers: int) -> list[int]:
    """None -> []; "all" -> every layer; an int or a list of ints (negative from the end) -> sorted unique."""
    if layers is None:
        return []
    if isinstance(layers, str):
        if layers == "all":
            return list(range(n_layers))
        raise QkvError(f"layers must be 'all', an integer or a list of integers, got {layers!r}")
    if not hasattr(layers, "__iter__"):
        layers = [layers]
    return sorted({check_layer(l, n_layers) for l in layers})


def select_rows(rows, m: int) -> tuple[int, int] | None:
    """--rows A:B, a Python slice over the m query positions ("-128:" the last 128), -> (r0, r1); None: all."""
    if rows is None:
        return None
    if isinstance(rows, str):
        parts = rows.split(":")
        try:
            if len(parts) != 2:
                raise ValueError
            rows = slice(*(int(x) if x.strip() else None for x in parts))
        except ValueError:
            raise QkvError(f"--rows {rows!r} is not a slice A:B of query positions (e.g. 0:16, or -128: for the "
                           "last 128)") from None  # fmt: skip
    if not isinstance(rows, slice) or rows.step not in (None, 1):
        raise QkvError(f"rows must be a slice A:B with no step, got {rows!r}")
    r = range(m)[rows]
    if not len(r):
        raise QkvError(f"--rows {_shown(rows)} selects no query of the {m} tokens: give A:B within 0..{m} "
                       f"(or -{m}..-1 from the end)")  # fmt: skip
    return r.start, r.stop


def _shown(s: slice) -> str:
    return f"{'' if s.start is None else s.start}:{'' if s.stop is None else s.stop}"


def check_head(index: int, n_heads: int) -> int:
    """A head index 0..tau-1 (--head), or QkvError naming the valid range."""
    if isinstance(index, bool) or not isinstance(index, int | np.integer):
        raise QkvError(f"head must be an integer, got {index!r}")
    if not 0 <= index < n_heads:
        raise QkvError(f"--head {index} does not exist: heads are numbered 0..{n_heads - 1}")
    return int(index)


def rows_of(tokens, r: slice):
    """The Tokens of query positions r (their strings, labels, offsets and ids)."""
    from dataclasses import replace

    return replace(tokens, strings=tokens.strings[r], labels=tokens.labels[r], offsets=tokens.offsets[r],
                   ids=None if tokens.ids is None else tokens.ids[r])  # fmt: skip
