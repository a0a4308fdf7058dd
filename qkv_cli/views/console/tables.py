"""Rich tables for the terminal: weights shaded like a heatmap, masked cells distinct, long inputs windowed.

A matrix table is laid out to the width it is given: as many columns as fit (every one, if it can), each as wide
as its numbers, then the labels as wide as the room left allows (full words when they fit). Compact cells (`.82`
for `0.82`) are used when they show more columns, or cut fewer labels. What is left out, a note under the table
says.
"""

from __future__ import annotations

import functools
import re

import numpy as np
from rich import box
from rich.color import Color
from rich.console import Group
from rich.style import Style
from rich.table import Table
from rich.text import Text

from qkv_cli.core.gqa import kv_head_of
from qkv_cli.views.console import clean

MASKED = "·"
LABEL_WIDTH = 10  # a row label is cut to this only when the columns need the room
LABEL_MAX = 24  # labels are never wider than this, however wide the terminal
LABEL_MIN = 3  # nor, when longer, narrower than this: "an…"
MAX_ROWS = 48
MAX_COLS = 128  # however wide (a file is): rich takes ~0.1 ms a cell, and the rows stop at MAX_ROWS anyway
EDGES = 2  # the table's left and right edge (SIMPLE_HEAD: one space each); each column adds itself + one gap
# viridis (the figures' colour map) in nine steps of the xterm 256-colour palette, each lighter than the one
# before (luminance .03 to .70): dark violet (0), blue, teal, green, yellow (1); exact on 256-colour and
# true-colour terminals alike, on a dark background and a light one
RAMP = (53, 54, 60, 30, 36, 71, 113, 148, 220)
BLACK, WHITE = Color.from_ansi(16), Color.from_ansi(231)


def short(label: str, width: int = LABEL_WIDTH) -> str:
    label = clean(str(label).replace("\n", "⏎").replace("\t", "⇥"))
    return label if len(label) <= width else label[: width - 1] + "…"


def _luminance(color: Color) -> float:
    """Relative luminance (WCAG) of a colour: which of black or white text reads on it."""
    r, g, b = (c / 255 for c in color.get_truecolor())
    r, g, b = ((c / 12.92) if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in (r, g, b))
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


@functools.cache
def _step(k: int) -> Style:
    background = Color.from_ansi(RAMP[k])
    light = (_luminance(background) + 0.05) / 0.05 > 1.05 / (_luminance(background) + 0.05)  # contrast with black
    return Style(bgcolor=background, color=BLACK if light else WHITE)


def shade(value: float) -> Style:
    """A background on the viridis ramp by weight in [0, 1]; black or white text, whichever contrasts more.
    Under NO_COLOR (or TERM=dumb, or in a file) rich drops the colours and only the numbers remain."""
    v = float(min(max(value, 0.0), 1.0)) if value == value else 0.0
    return _step(round(v * (len(RAMP) - 1)))


def fit(total: int, budget: int) -> int:
    return max(1, min(total, budget))


def grid_table(row_labels, col_labels, cell, cell_width, width, title=None, justify="right"):
    """A labelled grid of cells cell_width wide, with as many rows and columns as fit `width`; cell(i, j) -> Text.
    (qkv mask and attribution's norms; matrix_table lays out each column by its own numbers and label.)

    Returns (table, rows shown, columns shown)."""
    label_w = min(LABEL_WIDTH, max([len(x) for x in row_labels] + [3]))
    n_rows = fit(len(row_labels), MAX_ROWS)
    n_cols = fit(len(col_labels), (width - label_w - 2) // (cell_width + 2))  # 2 edges; cell + 1 and a separator
    title = Text(title, style="table.title", no_wrap=True, overflow="ignore") if title else None  # never wrapped
    table = Table(title=title, box=box.SIMPLE_HEAD, padding=(0, 0), pad_edge=False, title_justify="left")
    table.add_column(Text(""), justify="left", no_wrap=True, min_width=label_w, max_width=label_w)
    for j in range(n_cols):
        table.add_column(Text(short(col_labels[j], cell_width)), justify=justify, no_wrap=True,
                         min_width=cell_width + 1)  # fmt: skip
    for i in range(n_rows):
        table.add_row(Text(short(row_labels[i], label_w)), *(cell(i, j) for j in range(n_cols)))
    return table, n_rows, n_cols


def number(v: float, precision: int) -> str:
    """A cell's number: fixed point, or exponent form for a huge value (a huge --scale), -inf as is."""
    if np.isneginf(v):
        return "-inf"
    # fixed point would cut a huge value off unreadably
    return f"{v:.{precision}f}" if abs(v) < 1e6 else f"{v:.{max(precision, 1)}e}"


def compact(text: str) -> str:
    """`.82` for `0.82` (and `-.5` for `-0.5`): one character less per cell, when that makes every column fit."""
    return re.sub(r"^(-?)0\.(?=\d)", r"\1.", text)


def layout(cell_widths, label_lengths, row_label: int, width: int):
    """Column widths for as many leading columns as fit `width`, and the row labels' width.

    Each column is as wide as its widest cell and at least LABEL_MIN (a label cut to `…` names nothing); then all
    labels grow together, up to their own length, as far as the room allows; what is left widens the row labels
    up to `row_label`."""
    base = min(row_label, LABEL_WIDTH)
    room = width - EDGES - base
    lengths = [min(n, LABEL_MAX) for n in label_lengths]
    shown, used = 0, 0
    for w, n in zip(cell_widths, lengths, strict=False):
        w = max(w, min(n, LABEL_MIN))
        if used + w + 1 > room and shown:
            break
        shown, used = shown + 1, used + w + 1
    widths, lengths = list(cell_widths[:shown]), lengths[:shown]

    def total(cap):
        return sum(max(w, min(n, cap)) + 1 for w, n in zip(widths, lengths, strict=True))

    lo, hi = LABEL_MIN, max(lengths, default=0)
    while lo < hi:  # the widest label cap that still fits
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if total(mid) <= room else (lo, mid - 1)
    widths = [max(w, min(n, lo)) for w, n in zip(widths, lengths, strict=True)]
    return widths, min(row_label, base + max(0, room - sum(w + 1 for w in widths)))


def matrix_table(title, matrix, row_labels, col_labels, precision=2, width=120, weights=False, masked=None):
    """One 2-D matrix as a table; returns (table, note) where note says what was left out, if anything.

    masked: the cells of masked keys. In a weights table they are 0 and drawn as `·`; in any other (the scores,
    before the mask is added) the number is real and shown, dim."""
    rows, cols = matrix.shape
    n_rows = min(rows, MAX_ROWS)
    considered = min(cols, MAX_COLS, max(1, (width - EDGES) // 2))  # no more than fit at one character each
    block = matrix[:n_rows, :considered]
    marked = np.zeros(block.shape, dtype=bool) if masked is None else np.asarray(masked)[:n_rows, :considered]
    hidden = marked if weights else np.zeros_like(marked)
    cells = [[MASKED if hidden[i, j] else number(block[i, j], precision) for j in range(considered)]
             for i in range(n_rows)]  # fmt: skip
    row_names = [short(x, LABEL_MAX) for x in row_labels[:n_rows]]
    col_names = [short(x, LABEL_MAX) for x in col_labels[:considered]]
    row_label = max([len(x) for x in row_names] + [1])

    def widths(texts):
        return [max([len(texts[i][j]) for i in range(n_rows)] + [1]) for j in range(considered)]

    lengths = [min(len(x), LABEL_MAX) for x in col_names]

    def merit(laid):  # more columns first, then fewer labels cut
        return len(laid[1]), -sum(n > w for n, w in zip(lengths, laid[1], strict=False))

    full = (cells, *layout(widths(cells), lengths, row_label, width))
    small = [[compact(c) for c in row] for row in cells]
    small = (small, *layout(widths(small), lengths, row_label, width))
    cells, cols_w, row_w = small if merit(small) > merit(full) else full  # compact cells only if they buy room
    n_cols = len(cols_w)

    def cell(i, j):
        text = cells[i][j]
        if hidden[i, j]:
            return Text(text, style="dim")
        if weights:
            return Text(text, style=shade(block[i, j]))
        if text == "-inf" or marked[i, j]:
            return Text(text, style="dim")
        return Text(text)

    title = Text(title, style="table.title", no_wrap=True, overflow="ignore") if title else None  # never wrapped
    table = Table(title=title, box=box.SIMPLE_HEAD, padding=(0, 0), pad_edge=False, title_justify="left")
    table.add_column(Text(""), justify="left", no_wrap=True, min_width=row_w, max_width=row_w)
    for j, w in enumerate(cols_w):
        table.add_column(Text(short(col_names[j], w)), justify="right", no_wrap=True, min_width=w, max_width=w)
    for i in range(n_rows):
        table.add_row(Text(short(row_names[i], row_w)), *(cell(i, j) for j in range(n_cols)))
    note = None
    if n_rows < rows or n_cols < cols:
        note = (
            f"showing {n_rows} of {rows} rows and {n_cols} of {cols} columns; "
            "--format csv, --save-npz or qkv heatmap show all"
        )
    return table, note


def summary_table(summary, title="Per-head summary") -> Table:
    table = Table(title=title, box=box.SIMPLE_HEAD, title_justify="left")
    sinks = any("sink_share" in row for row in summary)  # gpt-oss: the mean share the sink took
    for name in ("head", "entropy (nats)", "max weight", "mean distance", "self share") + (("sink share",) * sinks):
        table.add_column(name, justify="right")
    for row in summary:
        table.add_row(
            str(row["head"]),
            f"{row['entropy']:.3f}",
            f"{row['max_weight']:.3f}",
            "-" if row["mean_distance"] != row["mean_distance"] else f"{row['mean_distance']:.2f}",  # nan: m != n
            "-" if row["self_share"] != row["self_share"] else f"{row['self_share']:.3f}",
            *([f"{row.get('sink_share', float('nan')):.3f}"] if sinks else []),
        )
    return table


PER_HEAD = {"q": "Q", "k": "K", "v": "V", "scores": "scores", "weights": "weights", "heads": "heads"}
TITLES = {
    "Q": "Q^[{j}] = H W_{j}^q",
    "K": "K^[{j}] = H W_{j}^k",
    "V": "V^[{j}] = H W_{j}^v",
    "scores": "scores = Q^[{j}] K^[{j}]^T * scale (before the mask)",
    "weights": "alpha = Softmax(scores + Mask), head {j}",
    "heads": "head {j} output = alpha V^[{j}]",
}


SINK_TITLE = "alpha = Softmax([scores + Mask, s_{j}]) without its last column, head {j}; sink = 1 - row sum"


def with_sink_column(weights, share, cols, masked):  # [m, n], [m] -> [m, 1 + n]: the sink's share first
    """A weights table of a model with attention sinks: column "sink" (1 - row sum), then the keys."""
    grid = np.concatenate([np.asarray(share, dtype=weights.dtype)[:, None], weights], axis=1)
    marks = None if masked is None else np.concatenate([np.zeros((len(share), 1), dtype=bool), masked], axis=1)
    return grid, ["sink", *cols], marks


def result_views(result, show, heads, precision=2, width=120, where=""):
    """Renderables for the matrices named in `show` (q, k, v, scores, mask, weights, heads, h, output), each
    table with its own note under it ("showing 48 of 300 rows ...").

    Returns (parts, notes); notes is empty (kept for callers that print notes after the parts)."""
    labels, key_labels = result.labels, result.key_labels
    parts = []

    def add(title, matrix, rows, cols, digits=precision, **kind):
        table, note = matrix_table(title, matrix, rows, cols, digits, width, **kind)
        parts.append(table if note is None else Group(table, Text(note, style="italic")))

    for name in show:
        if name in PER_HEAD:
            key = PER_HEAD[name]
            arr = getattr(result, key)
            for j in heads:
                kv = kv_head_of(j, result.tau, arr.shape[0]) if key in ("K", "V") else j
                matrix = arr[kv]
                is_grid = key in ("scores", "weights")
                cols = key_labels if is_grid else [f"{c}" for c in range(matrix.shape[1])]
                rows = key_labels if key in ("K", "V") else labels
                title = where + TITLES[key].format(j=kv)  # K, V: the key/value head (grouped-query attention)
                if key in ("K", "V") and result.is_cross:
                    title = title.replace("= H W", "= Y W")  # cross-attention: keys and values from the context
                masked = result.masked if is_grid else None
                if key == "weights" and result.sinks is not None:  # gpt-oss: the sink's share, first column
                    matrix, cols, masked = with_sink_column(matrix, result.sinks[j], cols, masked)
                    title = where + SINK_TITLE.format(j=j)
                # masked keys: their weights are 0, drawn as dots; their scores (before the mask) are real, dim
                add(title, matrix, rows, cols, weights=key == "weights", masked=masked)
        elif name == "mask":
            add(where + "Mask (0 = may attend, -inf = may not)", result.mask, labels, key_labels, 0)
        elif name in ("h", "output"):
            arr = result.H if name == "h" else result.output
            title = where + ("H (input)" if name == "h" else "output = concat(heads) W^o")
            add(title, arr, labels, [str(c) for c in range(arr.shape[1])])
    return parts, []


def legend(precision: int = 2) -> Text:
    zero = f"{0:.{precision}f}"
    return Text(f"{MASKED} = masked (may not attend); {zero} = allowed, weight rounds to zero", style="dim")


def legend_for(result, show, precision: int = 2) -> Text | None:
    """The legend of the dots, when a weights table shows one (some key masked in the rows shown)."""
    if "weights" not in show or not np.asarray(result.masked)[:MAX_ROWS].any():
        return None
    return legend(precision)
