"""`qkv heads`: per layer and head statistics and roles (see core.roles for the definitions and thresholds)."""

from __future__ import annotations

import csv
import io
import json
import sys

from qkv_cli.core.result import Kind
from qkv_cli.core.roles import LOCAL_RADIUS, THRESHOLDS, layer_head_stats
from qkv_cli.errors import QkvError
from qkv_cli.views.console import clean


def emit_roles(results: list, fmt: str) -> None:
    """`qkv heads`: per layer and head statistics aggregated over the sentences (one Result each)."""
    if results[0].kind == Kind.MODEL:
        run = results[0]
        info = run.model
        header = (f"{clean(info.name)} ({info.family}) L={info.n_layers} tau={run.attentions.shape[1]} "
                  f"d={run.last_hidden_state.shape[1]} kernel={run.kernel}")  # fmt: skip
        return emit_heads(layer_head_stats([r.attentions for r in results]), fmt, header, len(results))
    if any(r.is_cross for r in results):
        raise QkvError(
            "qkv heads needs self-attention (self, previous and first token are positions of one text): drop --context"
        )
    from qkv_cli.views.describe import settings_line

    stats = layer_head_stats([r.weights[None] for r in results], [~r.masked for r in results])
    header = settings_line(results[0]).split(" ", 1)[1]  # without m: lines differ in length
    emit_heads(stats, fmt, header, len(results))


COLUMNS = [
    ("entropy", "entropy"),
    ("norm_entropy", "norm H"),
    ("max_weight", "max w"),
    ("mean_distance", "dist"),
    ("self", "self"),
    ("previous", "prev"),
    ("first", "first"),
    ("local", "local"),
    ("softmax_grad", "grad"),
]


def emit_heads(stats_grid, fmt: str, header: str, sentences: int) -> None:
    """stats_grid: roles.layer_head_stats output (L x tau). L == 1 prints one row per head; L > 1 adds a
    layer x head grid of role labels."""

    flat = [s for row in stats_grid for s in row]
    if fmt == "json":
        doc = {
            "settings": header,
            "sentences": sentences,
            "thresholds": THRESHOLDS,
            "local_radius": LOCAL_RADIUS,
            "layers": len(stats_grid),
            "heads": flat,
        }
        sys.stdout.write(json.dumps(doc) + "\n")
        return
    if fmt == "csv":
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        names = ["layer", "head"] + [k for k, _ in COLUMNS] + ["role", "rows"]
        writer.writerow(names)
        for s in flat:
            writer.writerow([s[k] if isinstance(s[k], (int, str)) else repr(float(s[k])) for k in names])
        sys.stdout.write(buf.getvalue())
        return
    from rich import box
    from rich.table import Table

    from qkv_cli.views.console import console

    out = console()
    out.print(header, style="bold")
    rows = sum(s["rows"] for s in stats_grid[0][:1])
    out.print(f"{sentences} sentence{'s' if sentences != 1 else ''}, {rows} query rows per head")
    layers = len(stats_grid)
    if layers > 1:
        grid = Table(title="Roles: layer x head", box=box.SIMPLE_HEAD, title_justify="left", padding=(0, 1))
        grid.add_column("layer", justify="right")
        for j in range(len(stats_grid[0])):
            grid.add_column(str(j), justify="left", no_wrap=True)
        for layer, row in enumerate(stats_grid):
            grid.add_row(str(layer), *(ROLE_SHORT[s["role"]] for s in row))
        out.print(narrow(grid, out))
        out.print("prev = previous-token, self, first = first-token sink, local, broad, mixed", style="dim")
    table = Table(box=box.SIMPLE_HEAD, padding=(0, 1), pad_edge=False)
    if layers > 1:
        table.add_column("layer", justify="right", no_wrap=True)
    table.add_column("head", justify="right", no_wrap=True)
    for _, title in COLUMNS:
        table.add_column(title, justify="right", no_wrap=True)
    table.add_column("role", justify="left", no_wrap=True)
    for s in flat:
        cells = ([str(s["layer"])] if layers > 1 else []) + [str(s["head"])]
        cells += [f"{s[k]:.2f}" if k in ("entropy", "mean_distance") else f"{s[k]:.3f}" for k, _ in COLUMNS]
        table.add_row(*cells, s["role"])
    out.print(narrow(table, out))
    out.print(THRESHOLDS_TEXT.format(**THRESHOLDS, r=LOCAL_RADIUS), style="dim")


def narrow(table, out):
    """At a narrow terminal (80 columns), tighter gaps rather than numbers cut to '0.…'."""
    if out.measure(table, options=out.options.update_width(1 << 16)).maximum > out.width:
        table.padding, table.show_edge = (0, 0), False
        table.columns[-1].no_wrap = False  # the role may be cut ("previous-tok…"), not the numbers
    return table


ROLE_SHORT = {
    "previous-token": "prev",
    "self": "self",
    "first-token sink": "first",
    "local": "local",
    "broad": "broad",
    "mixed": "mixed",
}
THRESHOLDS_TEXT = (
    "role: previous-token if prev >= {previous}, self if self >= {self}, first-token sink if first >= {first} "
    "(largest wins); else local if local (within {r} positions) >= {local}; else broad if norm H >= {broad}; "
    "else mixed. grad = sum alpha (1 - alpha): softmax gradient size, near 0 = saturated."
)
