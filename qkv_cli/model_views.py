"""Views of a checkpoint run (checkpoint.ModelRun): tables per layer, JSON/NPZ with every layer, the model view."""

from __future__ import annotations

import json
import sys

from qkv_cli import export


def emit_run(run, show, heads, precision, fmt, save_npz=None) -> None:
    """Tables for each chosen layer; JSON with every chosen layer plus `attentions`; NPZ of the first chosen layer."""
    from qkv_cli import views

    first = run.results[run.layers[0]]
    if fmt == "json":
        from qkv_cli.checkpoint import settings_dict

        doc = json.loads(export.to_json(first, show, heads))
        doc.pop("matrices")
        doc["settings"] = settings_dict(first)
        doc["layers"] = {str(l): json.loads(export.to_json(r, show, heads))["matrices"] for l, r in run.results.items()}
        doc["attentions"] = export.jsonable(run.output.attentions)
        sys.stdout.write(json.dumps(doc, allow_nan=False) + "\n")
    elif fmt == "csv":
        for k, (l, r) in enumerate(run.results.items()):
            text = export.to_csv(r, show, heads).splitlines()
            header, rows = text[0], text[1:]
            if k == 0:
                sys.stdout.write("layer," + header + "\n")
            sys.stdout.writelines(f"{l},{row}\n" for row in rows)
    else:
        for r in run.results.values():
            views.emit(r, show, heads, precision, "table")
    if save_npz is not None:
        path = export.save_npz(first, save_npz)
        print(f"saved {path} (detail of layer {run.layers[0]}, attentions of all layers)", file=sys.stderr)


def save_heatmap(run, heads, layer_given: bool, path) -> str:
    """With --layer: that layer's heads (one --head: a single-head view). Without: the layers x heads model view."""
    from qkv_cli import views
    from qkv_cli.plot import draw_model_view, save_figure

    first = run.results[run.layers[0]]
    if layer_given:
        return views.save_heatmap(first, heads, path)
    info = first.extra["model"]
    title = f"{info['name']} ({info['family']}): model view, every layer x head, m={len(first.labels)}"
    save_figure(draw_model_view(run.output.attentions[:, heads], heads, first.masked, title), path)
    return str(path)


def emit_models(fmt: str) -> None:
    from rich import box
    from rich.table import Table
    from rich.text import Text

    from qkv_cli.budget import human
    from qkv_cli.models import find_models
    from qkv_cli.views import console

    rows = find_models()
    if fmt == "json":
        sys.stdout.write(json.dumps(rows, default=str) + "\n")
        return
    out = console()
    if not rows:
        out.print("no checkpoints found (Hugging Face cache or installed packages); give --model a folder")
        return
    table = Table(title="Checkpoints for --model", title_justify="left", box=box.SIMPLE_HEAD, padding=(0, 1, 0, 0))
    for col in ("name", "family", "layers", "heads", "d", "vocab", "size", "path"):
        justify = "right" if col in ("layers", "heads", "d", "vocab", "size") else "left"
        # the name is what --model takes: never cut it; a long path folds onto more lines
        table.add_column(col, justify=justify, no_wrap=col != "path", overflow="fold")
    for r in rows:
        cells = [r.get("name"), r.get("family"), r.get("layers"), r.get("heads"), r.get("d"), r.get("vocab_size"),
                 human(r["size_bytes"]) if r.get("size_bytes") else "", r.get("path")]  # fmt: skip
        table.add_row(*(Text("" if c is None else str(c)) for c in cells))
    out.print(table)
