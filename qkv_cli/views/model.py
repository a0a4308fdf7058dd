"""Views of a checkpoint run (a MODEL Result): tables per layer, JSON/NPZ with every layer, the model view;
and the list `qkv models` prints."""

from __future__ import annotations

import json
import sys

import numpy as np

from qkv_cli.views.console import clean
from qkv_cli.views.export import results as export


def emit_run(run, show, heads, precision, fmt, save_npz=None, stream=None) -> None:
    """Tables for each chosen layer; JSON with every chosen layer plus `attentions`; NPZ of the first chosen layer.
    stream: views.streaming's writer, which wrote the JSON's or CSV's layers as the forward made them."""
    from qkv_cli.views.layer import emit_layer

    experts, show = "experts" in show, [s for s in show if s != "experts"]  # the routing is not a layer's matrix
    first = run.first_layer()
    if stream is not None and fmt in ("json", "csv"):
        stream.finish(run, experts)
    elif fmt == "json":
        doc = export.json_doc(first, show, heads)
        doc.pop("matrices")
        doc["layers"] = {str(l): export.json_doc(r, show, heads)["matrices"] for l, r in run.layers.items()}
        doc.update(export.checkpoint_extras(run))  # ids, attentions, layer_types ...: the NPZ's names
        if run.predictions is not None:
            doc.update(predictions_doc(run))
        export.write_json(doc, sys.stdout)
        sys.stdout.write("\n")
    elif fmt == "csv":
        import csv

        writer = csv.writer(sys.stdout, lineterminator="\n")
        writer.writerow(["layer", *export.CSV_HEADER])
        for l, r in run.layers.items():
            sys.stdout.writelines(export.csv_text(r, show, heads, (l,)))
        if experts and run.router_top is not None:
            from qkv_cli.views.console.experts import csv_rows

            writer.writerows(csv_rows(run, list(run.layers)))
    else:
        for r in run.layers.values():
            if show:
                emit_layer(r, show, heads, precision, "table")
        if experts and run.router_top is not None:
            from qkv_cli.views.console import experts as routing

            routing.emit(run, list(run.layers), precision)
        if run.predictions is not None:
            from qkv_cli.views.console.predict import tables

            tables(run, precision)
    if save_npz is not None:
        from qkv_cli.views.export.writing import save_npz as save

        path = save(export.model_arrays(run), save_npz)
        print(f"saved {path} (detail of layer {first.model.layer}, attentions of all layers)", file=sys.stderr)


def predictions_doc(run) -> dict:
    """--predict / --logit-lens in JSON: per position the top next tokens; per layer and position the lens."""
    pr = run.predictions
    doc = {
        "predictions": [
            {
                "position": i,
                "token": run.labels[i],
                "top": [
                    {"token": lab, "id": int(t), "prob": float(p)}
                    for lab, t, p in zip(pr["labels"][i], pr["ids"][i], pr["probs"][i], strict=True)
                ],
            }
            for i in range(len(run.labels))
        ]
    }
    if "lens_ids" in pr:
        doc["logit_lens"] = [[{"token": pr["lens_labels"][l][i][0], "id": int(pr["lens_ids"][l, i, 0]),
                               "prob": float(pr["lens_probs"][l, i, 0])} for i in range(len(run.labels))]
                             for l in range(len(pr["lens_labels"]))]  # fmt: skip
    return doc


def heatmap_figure(run, heads, layer_given: bool, scale: str = "linear"):
    """With --layer: that layer's heads (one --head: a single head); several --layer: a layer x head grid.
    Without: the model view, every layer x head as one mosaic."""
    from qkv_cli.views.console.describe import figure_title, settings_line
    from qkv_cli.views.figures.captions import heads_words, layers_subtitle
    from qkv_cli.views.figures.heatmaps import draw_grid, draw_model_view
    from qkv_cli.views.layer import heatmap_figure as layer_figure

    first = run.first_layer()
    if layer_given and len(run.layers) == 1:
        return layer_figure(first, heads, scale)
    if layer_given:  # a layer x head grid; where the layers differ, each panel names its layer's kind
        subtitle, kinds = layers_subtitle(run, heads)
        panels = [(f"layer {l}" + (f" ({kinds[l]})" if kinds else "") + f", head {j}", r.weights[j], r.masked)
                  for l, r in run.layers.items() for j in heads]  # fmt: skip
        shown = figure_title(first, heads).split(": ")[-1]
        title = f"{clean(run.model.name)}: layers {', '.join(map(str, run.layers))} x {shown}"
        grid = (len(run.layers), len(heads))
        keys = first.key_labels
        if first.sinks is not None:  # gpt-oss: each row's sink share as a first column
            from qkv_cli.views.layer import SINK_NOTE, sink_panels

            shares = [r.sinks[j] for r in run.layers.values() for j in heads]
            panels, keys = sink_panels(panels, shares, keys)
            subtitle += f"; {SINK_NOTE}"
        settings = " | ".join(settings_line(r) for r in run.layers.values())
        return draw_grid(panels, first.labels, keys, title, subtitle, scale, grid, settings=settings)
    info = run.model
    title = f"{clean(info.name)}: every layer x head ({info.n_layers} x {len(heads)}), m={len(run.labels)}"
    settings = f"{info.family}, kernel={run.kernel}, {first.dtype}; rows: layers, columns: heads"
    subtitle = (f"{len(run.labels)} tokens; rows: layers, columns: heads ({heads_words(heads, first.tau)}); each "
                "tile: queries (rows) x keys (columns)")  # fmt: skip
    masked = np.stack([run.layer_masked(l) for l in range(info.n_layers)])
    kinds = [t.replace("_attention", "") for t in run.layer_types] if any(run.layer_types) else None
    tiles = run.attentions[:, heads]
    if run.sinks is not None:  # gpt-oss: each tile's first column is its rows' sink share
        tiles = np.concatenate([run.sinks[:, heads, :, None], tiles], axis=-1)
        masked = np.concatenate([np.zeros((*masked.shape[:2], 1), dtype=bool), masked], axis=-1)
        subtitle += "; each tile's first column: the sink's share of the row (1 - row sum)"
    return draw_model_view(tiles, heads, masked, title, kinds, subtitle, scale, settings)


def emit_models(rows: list[dict], fmt: str) -> None:
    """`qkv models`: rows of models.formats.find.find_models, as a table or JSON."""
    from rich import box
    from rich.table import Table
    from rich.text import Text

    from qkv_cli.core.budget import human
    from qkv_cli.views.console import console

    if fmt == "json":
        sys.stdout.write(json.dumps(rows, default=str) + "\n")
        return
    out = console()
    if not rows:
        out.print(
            "no checkpoints found (Hugging Face cache, installed packages, ollama, LM Studio); give --model a folder"
        )
        return
    table = Table(title="Checkpoints for --model", title_justify="left", box=box.SIMPLE_HEAD, padding=(0, 1, 0, 0))
    names = ("name", "family", "layers", "heads", "d", "vocab", "size", "path")
    rows_cells = [[clean("" if c is None else str(c)) for c in (
        r.get("name"), r.get("family"), r.get("layers"), r.get("heads"), r.get("d"), r.get("vocab_size"),
        human(r["size_bytes"]) if r.get("size_bytes") else "", r.get("path"))] for r in rows]  # fmt: skip
    # the name is what --model takes: never cut it; a path too long for the width keeps its end ("…/model")
    others = sum(max(len(n), *(len(c[i]) for c in rows_cells)) + 2 for i, n in enumerate(names[:-1]))
    room = out.width - others - 4  # each column: its cells, a space of padding and one of separator
    if room < 10:  # no room for a useful path: leave the column out rather than squeeze every other one
        names, rows_cells = names[:-1], [c[:-1] for c in rows_cells]
    longest = max(len(c[0]) for c in rows_cells)
    for col in names:
        table.add_column(col, justify="left" if col in ("name", "family", "path") else "right", no_wrap=True,
                         min_width=longest if col == "name" else None)  # fmt: skip
    for cells in rows_cells:
        if names[-1] == "path" and len(cells[-1]) > room:
            cells[-1] = "…" + cells[-1][-(room - 1) :]
        table.add_row(*(Text(c) for c in cells))
    out.print(table)
    if names[-1] != "path":
        out.print("(paths left out at this width: widen the terminal, or qkv models --format json)", style="dim")
    for r in rows:  # a bad entry is listed, with why
        if r.get("error"):
            out.print(Text(f"{clean(r.get('name') or '?')}: {clean(r['error'])}"), style="dim")
