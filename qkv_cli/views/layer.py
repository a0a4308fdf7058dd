"""One attention layer (SEEDED, or LAYER of a checkpoint): its tables, JSON, CSV, NPZ and heatmap."""

from __future__ import annotations

import sys

from qkv_cli.core.result import Result
from qkv_cli.views.console.describe import ablation_line, figure_title, settings_line


def emit_layer(result: Result, show, heads, precision, fmt, save_npz=None) -> None:
    """One attention layer (SEEDED, or LAYER of a checkpoint): tables, JSON or CSV; then the NPZ if asked."""
    from qkv_cli.core.stats import head_summary
    from qkv_cli.views.console import console, tables
    from qkv_cli.views.export import results as export

    if fmt == "json":
        export.write_json(export.json_doc(result, show, heads), sys.stdout)
        sys.stdout.write("\n")
    elif fmt == "csv":
        import csv

        writer = csv.writer(sys.stdout, lineterminator="\n")
        writer.writerow(export.CSV_HEADER)
        sys.stdout.writelines(export.csv_text(result, show, heads))  # row by row: never the whole text in memory
    else:
        out = console()
        out.print(settings_line(result), style="bold")
        where = f"layer {result.model.layer}: " if result.model is not None else ""
        parts, _ = tables.result_views(result, show, heads, precision, out.width, where)
        for part in parts:  # each table with its note ("showing 48 of 300 rows ...") under it
            out.print(part)
        key = tables.legend_for(result, show, precision)  # the dots' legend, only when some are drawn
        if key is not None:
            out.print(key)
        if result.ablation is not None:
            out.print(ablation_line(result.ablation), style="yellow")
        if result.empty_rows.any():
            rows = ", ".join(str(i) for i in result.empty_rows.nonzero()[0][:10])
            out.print(f"queries with every key masked (weights all 0): {rows}", style="yellow")
        summary = head_summary(result.weights[heads], live_rows=~result.empty_rows, cross=result.is_cross,
                               positions=result.rows)  # fmt: skip
        for row, j in zip(summary, heads, strict=True):
            row["head"] = j
            if result.sinks is not None:
                row["sink_share"] = float(result.sinks[j].mean())
        out.print(tables.summary_table(summary))
    if save_npz is not None:
        from qkv_cli.views.export.writing import save_npz as save

        print(f"saved {save(export.layer_arrays(result), save_npz)}", file=sys.stderr)


def heatmap_figure(result: Result, heads, scale: str = "linear"):
    """One panel per head (one head: one unlabelled panel), the sink's share first where the layer has sinks."""
    from qkv_cli.views.figures.captions import subtitle
    from qkv_cli.views.figures.heatmaps import draw_grid

    panels = [(f"head {j}", result.weights[j], result.masked) for j in heads]
    keys, words = result.key_labels, subtitle(result, heads)
    if result.sinks is not None:  # gpt-oss: the sink's share of each row as a first column
        panels, keys = sink_panels(panels, [result.sinks[j] for j in heads], keys)
        words += f"; {SINK_NOTE}"
    if len(heads) == 1:
        panels = [("", *panels[0][1:])]
    title = figure_title(result, heads)
    return draw_grid(panels, result.labels, keys, title, words, scale, settings=settings_line(result))


SINK_NOTE = "column 'sink': the share of each row the sink took (1 - row sum)"


def sink_panels(panels, shares, keys):  # [(name, [m, n], [m, n])], [[m]] -> the same with [m, 1 + n], keys
    """Figure panels with the sink's share of each row as a first column, labelled 'sink'."""
    from qkv_cli.views.console.tables import with_sink_column

    out = []
    for (name, weights, masked), share in zip(panels, shares, strict=True):
        grid, cols, marks = with_sink_column(weights, share, keys, masked)
        out.append((name, grid, marks))
    return out, cols
