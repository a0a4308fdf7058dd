"""Rich tables for the terminal: weights shaded like a heatmap, masked cells distinct, long inputs windowed."""

from __future__ import annotations

import numpy as np
from rich import box
from rich.color import Color
from rich.style import Style
from rich.table import Table
from rich.text import Text

from qkv_cli.core.gqa import kv_head_of
from qkv_cli.views.console import clean

MASKED = "·"
LABEL_WIDTH = 10
MAX_ROWS = 48


def short(label: str, width: int = LABEL_WIDTH) -> str:
    label = clean(str(label).replace("\n", "⏎").replace("\t", "⇥"))
    return label if len(label) <= width else label[: width - 1] + "…"


def shade(value: float) -> Style:
    """White-to-blue background by weight in [0, 1]; dark text on light cells, light text on dark ones."""
    v = float(min(max(value, 0.0), 1.0))
    r, g, b = (int(255 - v * (255 - c)) for c in (31, 78, 160))
    return Style(bgcolor=Color.from_rgb(r, g, b), color="white" if v > 0.45 else "black")


def fit(total: int, budget: int) -> int:
    return max(1, min(total, budget))


def grid_table(row_labels, col_labels, cell, cell_width, width, title=None, justify="right"):
    """A labelled grid with as many rows and columns as fit `width`; cell(i, j) -> Text.

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


def matrix_table(title, matrix, row_labels, col_labels, precision=2, width=120, weights=False, masked=None):
    """One 2-D matrix as a table; returns (table, note) where note says what was left out, if anything."""
    rows, cols = matrix.shape

    def cell(i, j):
        v = matrix[i, j]
        if masked is not None and masked[i, j]:
            return Text(MASKED, style="dim")
        if weights:
            return Text(f"{v:.{precision}f}", style=shade(v))
        if np.isneginf(v):
            return Text("-inf", style="dim")
        # a huge value (a huge --scale) in exponent form: fixed point would be cut off unreadably
        return Text(f"{v:.{precision}f}" if abs(v) < 1e6 else f"{v:.{max(precision, 1)}e}")

    width_of_cell = precision + 3 + (0 if weights else 2)
    table, n_rows, n_cols = grid_table(row_labels, col_labels, cell, width_of_cell, width, title)
    note = None
    if n_rows < rows or n_cols < cols:
        note = (
            f"showing {n_rows} of {rows} rows and {n_cols} of {cols} columns; "
            "--format csv, --save-npz or qkv heatmap show all"
        )
    return table, note


def summary_table(summary, title="Per-head summary") -> Table:
    table = Table(title=title, box=box.SIMPLE_HEAD, title_justify="left")
    for name in ("head", "entropy (nats)", "max weight", "mean distance", "self share"):
        table.add_column(name, justify="right")
    for row in summary:
        table.add_row(
            str(row["head"]),
            f"{row['entropy']:.3f}",
            f"{row['max_weight']:.3f}",
            "-" if row["mean_distance"] != row["mean_distance"] else f"{row['mean_distance']:.2f}",  # nan: m != n
            "-" if row["self_share"] != row["self_share"] else f"{row['self_share']:.3f}",
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


def result_views(result, show, heads, precision=2, width=120, where=""):
    """Renderables for the matrices named in `show` (q, k, v, scores, mask, weights, heads, h, output)."""
    labels, key_labels = result.labels, result.key_labels
    masked = result.masked
    parts, notes = [], []
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
                table, note = matrix_table(
                    title,
                    matrix,
                    rows,
                    cols,
                    precision,
                    width,
                    weights=key == "weights",
                    masked=masked if is_grid else None,
                )
                parts.append(table)
                notes.append(note)
        elif name == "mask":
            table, note = matrix_table(
                where + "Mask (0 = may attend, -inf = may not)", result.mask, labels, key_labels, 0, width
            )
            parts.append(table)
            notes.append(note)
        elif name in ("h", "output"):
            arr = result.H if name == "h" else result.output
            title = where + ("H (input)" if name == "h" else "output = concat(heads) W^o")
            table, note = matrix_table(title, arr, labels, [str(c) for c in range(arr.shape[1])], precision, width)
            parts.append(table)
            notes.append(note)
    return parts, sorted({n for n in notes if n})


def legend() -> Text:
    return Text(f"{MASKED} = masked (may not attend); 0.00 = allowed, weight rounds to zero", style="dim")
