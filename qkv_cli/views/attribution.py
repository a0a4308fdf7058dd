"""`qkv attribute` and `qkv heatmap --method`: an ATTRIBUTION Result beside the raw weights it corrects.

Table: the layer's weights (mean over heads), the attribution (queries x keys), per head with --head (value-norm),
and what each key receives on average: raw weight against attribution share (and ||f(x_j)|| for value-norm).
JSON, CSV and NPZ use the export names: attribution (m, n), attribution_heads (tau, m, n) where the method has
heads, value_norms (tau, n), weights (tau, m, n), method, layer, ids, tokens.
"""

from __future__ import annotations

import sys

import numpy as np

from qkv_cli.core.result import Result
from qkv_cli.views.console import clean
from qkv_cli.views.console.describe import attributed_layer as layer_of
from qkv_cli.views.console.describe import attribution_formula as describe


def row_shares(matrix) -> np.ndarray:  # [..., m, n] -> the same with each row summing to 1 (zeros stay zeros)
    matrix = np.asarray(matrix, dtype=np.float64)
    total = matrix.sum(axis=-1, keepdims=True)
    return np.divide(matrix, total, out=np.zeros_like(matrix), where=total > 0)


def shares(r: Result) -> np.ndarray:  # -> [m, n] the attribution with each row summing to 1
    return row_shares(r.attribution)


def received(r: Result) -> list[dict]:
    """Per key: the mean raw weight it gets (over heads and queries) and its mean attribution share."""
    live = ~r.empty_rows
    weight = r.weights[:, live].mean(axis=(0, 1)) if live.any() else np.zeros(r.weights.shape[-1])
    share = shares(r)[live].mean(axis=0) if live.any() else np.zeros(r.weights.shape[-1])
    out = []
    for j, label in enumerate(r.key_labels):
        row = {"key": j, "token": label, "weight": float(weight[j]), "attribution": float(share[j])}
        if r.value_norms is not None:
            row["value_norm"] = float(r.value_norms[:, j].mean())
        out.append(row)
    return out


def arrays(r: Result) -> dict:
    """What --save-npz writes."""
    out = {"attribution": r.attribution, "method": np.array(r.method), "layer": np.int64(layer_of(r)),
           "tokens": np.array(list(r.tokens.strings), dtype=str), "labels": np.array(r.labels, dtype=str),
           "weights": r.weights, "mask": r.mask}  # fmt: skip
    if r.ids is not None:
        out["ids"] = np.asarray(r.ids, dtype=np.int64)
    for name in ("attribution_heads", "value_norms"):
        if getattr(r, name) is not None:
            out[name] = getattr(r, name)
    if r.head_fusion:
        out["head_fusion"] = np.array(r.head_fusion)
    if r.is_cross:
        out["context_tokens"] = np.array(list(r.context.strings), dtype=str)
    return out


def json_doc(r: Result) -> dict:
    from qkv_cli.views.export.results import settings_dict

    doc = {"method": r.method, "layer": layer_of(r), "tokens": list(r.tokens.strings), "labels": r.labels,
           "ids": None if r.ids is None else [int(i) for i in r.ids], "settings": settings_dict(r),
           "formula": describe(r)}  # fmt: skip
    if r.is_cross:
        doc["context_tokens"] = r.key_labels
    if r.head_fusion:
        doc["head_fusion"] = r.head_fusion
    if r.cost is not None:
        doc["cost"] = r.cost
    for name in ("attribution", "attribution_heads", "value_norms", "weights"):
        if getattr(r, name) is not None:
            doc[name] = np.asarray(getattr(r, name))  # written row by row (export.write_json), -inf as null
    doc["received"] = received(r)
    return doc


def csv_rows(r: Result):
    """matrix, head, query, key, query_token, key_token, value (value_norms: no query)."""
    labels, keys = r.labels, r.key_labels
    blocks = [("attribution", "", r.attribution)]
    blocks += [(name, j, getattr(r, name)[j]) for name in ("attribution_heads", "weights")
               if getattr(r, name) is not None for j in range(getattr(r, name).shape[0])]  # fmt: skip
    for name, head, matrix in blocks:
        for i in range(matrix.shape[0]):
            for j in range(matrix.shape[1]):
                yield [name, head, i, j, labels[i], keys[j], repr(float(matrix[i, j]))]
    if r.value_norms is not None:
        for h, row in enumerate(r.value_norms):
            yield from (["value_norms", h, "", j, "", keys[j], repr(float(v))] for j, v in enumerate(row))


def emit(r: Result, show, heads, precision: int, fmt: str, save_npz=None) -> None:
    """Table, JSON or CSV on stdout; then the NPZ if asked. heads: per-head tables (value-norm), [] for none."""
    if fmt == "json":
        from qkv_cli.views.export.results import write_json

        write_json(json_doc(r), sys.stdout)
        sys.stdout.write("\n")
    elif fmt == "csv":
        import csv

        writer = csv.writer(sys.stdout, lineterminator="\n")
        writer.writerow(["matrix", "head", "query", "key", "query_token", "key_token", "value"])
        writer.writerows(csv_rows(r))
    else:
        tables(r, heads, precision)
    if save_npz is not None:
        from qkv_cli.views.export.writing import save_npz as save

        print(f"saved {save(arrays(r), save_npz)}", file=sys.stderr)


def tables(r: Result, heads, precision: int) -> None:
    from qkv_cli.views.console import console
    from qkv_cli.views.console import tables as t
    from qkv_cli.views.console.describe import settings_line

    out = console()
    out.print(settings_line(r), style="bold")
    out.print(describe(r))
    if r.cost is not None:
        out.print(f"cost: {r.cost['passes']} passes of layer {layer_of(r)} (one per key, one intact), about "
                  f"{human(r.cost['bytes'])} held at once", style="dim")  # fmt: skip
    where = f"layer {layer_of(r)}: "
    panels = [(where + "alpha, mean over heads", r.weights.mean(axis=0), True)]
    if r.method == "value-norm":
        panels.append((where + "||sum_h alpha^h_ij f^h(x_j)|| (shaded by row share)", r.attribution, False))
        for j in heads:
            panels += [(where + f"alpha, head {j}", r.weights[j], True),
                       (where + f"alpha^{j}_ij ||f^{j}(x_j)||, head {j}", r.attribution_heads[j], False)]  # fmt: skip
    else:
        panels.append((r.method + (f" ({r.head_fusion} over heads)" if r.head_fusion else ""), r.attribution, True))
    for title, matrix, is_weight in panels:
        table, note = grid(title, matrix, r, precision, out.width, is_weight)
        out.print(table)
        if note:  # each note under its table
            out.print(note, style="italic")
    if np.asarray(r.masked)[: t.MAX_ROWS].any():  # the dots' legend, only when some are drawn
        out.print(t.legend())
    out.print(summary(r))


def grid(title, matrix, r: Result, precision: int, width: int, is_weight: bool):
    """A queries x keys table; a matrix that is not a weight (norms) is printed as is and shaded by its row share."""
    from rich.text import Text

    from qkv_cli.views.console import tables as t

    if is_weight:
        return t.matrix_table(title, matrix, r.labels, r.key_labels, precision, width, weights=True, masked=r.masked)
    share = row_shares(matrix)

    def cell(i, j):
        if r.masked[i, j]:
            return Text(t.MASKED, style="dim")
        return Text(f"{matrix[i, j]:.{precision}f}", style=t.shade(share[i, j]))

    widest = max(len(f"{v:.{precision}f}") for v in (matrix.max(), matrix.min()))
    table, rows, cols = t.grid_table(r.labels, r.key_labels, cell, widest, width, title)
    m, n = matrix.shape
    if rows == m and cols == n:
        return table, None
    return table, f"showing {rows} of {m} rows and {cols} of {n} columns; --format csv or --save-npz show all"


def summary(r: Result):
    from rich import box
    from rich.table import Table

    norm = r.value_norms is not None
    table = Table(title="What each key receives, mean over queries", box=box.SIMPLE_HEAD, title_justify="left")
    for name in ("key", "token", "weight (mean over heads)", f"{r.method} share") + (("||f(x_j)||",) if norm else ()):
        table.add_column(name, justify="left" if name == "token" else "right", no_wrap=True)
    for row in received(r):
        cells = [str(row["key"]), clean(row["token"]), f"{row['weight']:.3f}", f"{row['attribution']:.3f}"]
        table.add_row(*cells, *([f"{row['value_norm']:.2f}"] if norm else []))
    return table


def human(n: float) -> str:
    from qkv_cli.core.budget import human as size

    return size(n)


def heatmap_figure(r: Result, heads, scale: str = "linear"):
    """Panels: the layer's weights (mean over heads), the attribution (rows as shares), per head with --head."""
    from qkv_cli.views.console.describe import settings_line
    from qkv_cli.views.figures.captions import mask_words
    from qkv_cli.views.figures.heatmaps import draw_grid

    panels = [
        (f"alpha, layer {layer_of(r)}, mean over heads", r.weights.mean(axis=0), r.masked),
        (f"{r.method}" + (" (rows as shares)" if r.method == "value-norm" else ""), shares(r), r.masked),
    ]
    if r.attribution_heads is not None:
        panels += [(f"{r.method}, head {j}", row_shares(r.attribution_heads[j]), r.masked) for j in heads]
    name = clean(r.model.name) + ", " if r.model is not None else ""
    title = f"{name}{r.method}, layer {layer_of(r)}"
    fig = draw_grid(panels, r.labels, r.key_labels, title, describe(r) + "; " + mask_words(r), scale,
                    settings=describe(r) + "; " + settings_line(r))  # fmt: skip
    fig.axes[-1].set_ylabel("weight / attribution share (rows sum to 1)", fontsize=10)
    return fig
