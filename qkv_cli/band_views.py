"""Views of a long-document window run (longdoc.BandResult): summaries and strongest links, not m x m tables."""

from __future__ import annotations

import csv
import json
import sys

import numpy as np

from qkv_cli import longdoc


def settings_line(result) -> str:
    s = result.settings
    m, n_c = result.band.shape[1:]
    return (
        f"m={m} d={s.d} tau={s.tau} d_k={s.d_k} scale={result.scale:.4g} ({s.scale}) window n_c={n_c}, "
        f"band only: weights kept as (tau, m, n_c), never m x m; {s.dtype} seed={s.seed}"
    )


def emit(result, show, heads, precision, fmt, save_npz=None) -> None:
    from qkv_cli import export

    labels = result.labels
    if fmt == "json":
        doc = {
            "tokens": list(result.tokens.strings),
            "settings": export.settings_dict(result),
            "band": {
                "window": int(result.band.shape[-1]),
                "layout": "weights_band[j, i, t] is query i on key i-n_c+1+t",
            },
            "summary": longdoc.summary(result, heads),
            "links": {str(j): [[i, k, w] for i, k, w in longdoc.strongest_links(result, j)] for j in heads},
        }
        sys.stdout.write(json.dumps(doc) + "\n")
    elif fmt == "csv":
        writer = csv.writer(sys.stdout, lineterminator="\n")
        writer.writerow(["matrix", "head", "query", "key", "query_token", "key_token", "value"])
        for j in heads:
            i_idx, t_idx = np.nonzero(result.keys >= 0)
            for i, t in zip(i_idx.tolist(), t_idx.tolist(), strict=True):
                k = int(result.keys[i, t])
                writer.writerow(["weights", j, i, k, labels[i], labels[k], repr(float(result.band[j, i, t]))])
    else:
        from rich.table import Table
        from rich.text import Text

        from qkv_cli import render
        from qkv_cli.views import console

        out = console()
        out.print(Text(settings_line(result)), style="bold")
        out.print(render.summary_table(longdoc.summary(result, heads)))
        table = Table(title="Strongest links (query -> earlier key) per head", title_justify="left")
        for name in ("head", "query", "", "key", "distance", "weight"):
            table.add_column(name, justify="right" if name in ("head", "distance", "weight") else "left")
        for j in heads:
            for i, k, w in longdoc.strongest_links(result, j, k=5):
                query, key = Text(f"{i} {render.short(labels[i])}"), Text(f"{k} {render.short(labels[k])}")
                table.add_row(str(j), query, "->", key, str(i - k), f"{w:.{precision}f}")
        out.print(table)
        out.print(
            "--save-npz keeps every weight as weights_band (tau, m, n_c); --format csv lists them", style="italic"
        )
    if save_npz is not None:
        path = export.check_output_path(save_npz)
        with export.atomic_write(path) as handle:
            np.savez(handle, **longdoc.arrays(result))
        print(f"saved {path}", file=sys.stderr)


def save_heatmap(result, heads, path) -> str:
    """One panel per head: queries on rows, the window's slots on columns (oldest key left, self right)."""
    from qkv_cli.plot import draw_grid, save_figure

    n_c = result.band.shape[-1]
    cols = [f"i-{n_c - 1 - t}" if t < n_c - 1 else "i" for t in range(n_c)]
    panels = [(f"head {j}", result.band[j], result.keys < 0) for j in heads]
    save_figure(draw_grid(panels, result.labels, cols, settings_line(result)), path)
    return str(path)
