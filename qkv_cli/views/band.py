"""Views of a long-document window run (a BAND Result): summaries and strongest links, not m x m tables."""

from __future__ import annotations

import csv
import json
import sys

import numpy as np

from qkv_cli.core.stats import band_summary, strongest_links
from qkv_cli.views.console.describe import figure_title, settings_line


def emit(result, show, heads, precision, fmt, save_npz=None) -> None:
    from qkv_cli.views.export import results as export

    labels = result.labels
    if fmt == "json":
        doc = {
            "tokens": list(result.tokens.strings),
            "settings": export.settings_dict(result),
            "band": {
                "window": int(result.band.shape[-1]),
                "layout": "weights_band[j, i, t] is query i on key i-n_c+1+t",
            },
            "summary": band_summary(result.band, heads),
            "links": {
                str(j): [[i, k, w] for i, k, w in strongest_links(result.band, result.band_keys, j)] for j in heads
            },  # fmt: skip
        }
        sys.stdout.write(json.dumps(doc) + "\n")
    elif fmt == "csv":
        writer = csv.writer(sys.stdout, lineterminator="\n")
        writer.writerow(export.CSV_HEADER)
        i_idx, t_idx = np.nonzero(result.band_keys >= 0)
        for j in heads:
            for i, t in zip(i_idx.tolist(), t_idx.tolist(), strict=True):
                k = int(result.band_keys[i, t])
                writer.writerow(["weights", j, i, k, labels[i], labels[k], repr(float(result.band[j, i, t]))])
    else:
        from rich.table import Table
        from rich.text import Text

        from qkv_cli.views.console import console, tables

        out = console()
        out.print(Text(settings_line(result)), style="bold")
        out.print(tables.summary_table(band_summary(result.band, heads)))
        table = Table(title="Strongest links (query -> earlier key) per head", title_justify="left")
        for name in ("head", "query", "", "key", "distance", "weight"):
            table.add_column(name, justify="right" if name in ("head", "distance", "weight") else "left")
        for j in heads:
            for i, k, w in strongest_links(result.band, result.band_keys, j, k=5):
                query, key = Text(f"{i} {tables.short(labels[i])}"), Text(f"{k} {tables.short(labels[k])}")
                table.add_row(str(j), query, "->", key, str(i - k), f"{w:.{precision}f}")
        out.print(table)
        out.print(
            "--save-npz keeps every weight as weights_band (tau, m, n_c); --format csv lists them", style="italic"
        )
    if save_npz is not None:
        from qkv_cli.views.export.writing import save_npz as save

        print(f"saved {save(export.band_arrays(result), save_npz)}", file=sys.stderr)


def heatmap_figure(result, heads, scale: str = "linear"):
    """One panel per head: queries on rows, the window's slots on columns (oldest key left, self right)."""
    from qkv_cli.views.figures.captions import subtitle
    from qkv_cli.views.figures.heatmaps import draw_grid

    n_c = result.band.shape[-1]
    cols = [f"i-{n_c - 1 - t}" if t < n_c - 1 else "i" for t in range(n_c)]
    panels = [(f"head {j}", result.band[j], result.band_keys < 0) for j in heads]
    title = figure_title(result, heads)
    return draw_grid(panels, result.labels, cols, title, subtitle(result, heads), scale, settings=settings_line(result))
