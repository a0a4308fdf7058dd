"""`qkv scan`'s views: the table of the top heads per score, the layer x head heatmap of a score's mean, and the
progress bar (rich; only on a terminal)."""

from __future__ import annotations

import json
import sys
from contextlib import contextmanager

import numpy as np

from qkv_cli.pipeline.scan.summary import top_heads
from qkv_cli.views.console import clean


def header(summary: dict, out: str) -> list[str]:
    s = summary
    lines = [f"{clean(s['model'])}: {s['texts']:,} texts scanned of {s['records']:,} read, L={s['layers']} "
             f"tau={s['heads']}, in {clean(out)}"]  # fmt: skip
    notes = []
    if s["unreadable"]:
        first = s["unreadable"][0]["problem"]
        notes.append(f"{s['unreadable_count']:,} unreadable (the first: {clean(first)})")
    if s["cut"]:
        notes.append(f"{s['cut']} cut to --max-tokens")
    if notes:
        lines.append("; ".join(notes) + " (summary.json lists them)")
    return lines


def emit(summary: dict, out: str, fmt: str = "table", top: int = 3, scores=None) -> None:
    """The top heads of every score (mean across the texts; `holds`: the share of texts over the role threshold)."""
    names = list(scores or summary["columns"])
    best = {name: top_heads(summary, name, top) for name in names}
    if fmt == "json":
        doc = {k: summary[k] for k in ("model", "corpus", "layers", "heads", "records", "texts", "cut")}
        doc |= {"out": out, "unreadable": summary["unreadable_count"], "top": best}
        sys.stdout.write(json.dumps(doc) + "\n")
        return
    from rich import box
    from rich.table import Table

    from qkv_cli.views.console import console

    con = console()
    for i, line in enumerate(header(summary, out)):
        con.print(line, style="bold" if i == 0 else None)
    table = Table(title=f"Top {top} heads per score: mean across the texts", box=box.SIMPLE_HEAD,
                  title_justify="left", padding=(0, 1))  # fmt: skip
    table.add_column("score", no_wrap=True)
    for rank in range(top):
        table.add_column(f"#{rank + 1}", no_wrap=True)
    for name in names:
        cells = []
        for row in best[name]:
            cell = f"L{row['layer']} H{row['head']} {row['mean']:.3f}"
            if "holds" in row:
                cell += f" ({row['holds']:.0%})"
            cells.append(cell)
        table.add_row(clean(name), *cells)
    con.print(table)
    con.print(
        "(%): the share of texts on which the head passes its role threshold (qkv heads: previous >= 0.5, "
        "induction >= 0.3 ...)",
        style="dim",
    )


def heatmap_figure(summary: dict, score: str):
    """Layer x head of the mean of `score` (a matplotlib Figure), each cell's value printed when the grid is small."""
    from qkv_cli.views.figures.heatmaps import setup

    setup()
    from matplotlib.figure import Figure

    grid = np.asarray(summary["scores"][score]["mean"], dtype=np.float64)
    L, tau = grid.shape
    cell = max(0.22, min(0.6, 9.0 / max(L, tau)))
    width, height = tau * cell + 2.4, L * cell + 1.6
    fig = Figure(figsize=(width, height))
    ax = fig.add_axes((1.0 / width, 0.6 / height, tau * cell / width, L * cell / height))
    image = ax.imshow(grid, cmap="viridis", interpolation="nearest", aspect="auto")
    ax.set_xticks(range(tau), [str(j) for j in range(tau)], fontsize=8)
    ax.set_yticks(range(L), [str(l) for l in range(L)], fontsize=8)
    ax.set_xlabel("head", fontsize=9)
    ax.set_ylabel("layer", fontsize=9)
    if L * tau <= 400:
        mid = (np.nanmin(grid) + np.nanmax(grid)) / 2
        for l in range(L):
            for j in range(tau):
                ax.text(j, l, f"{grid[l, j]:.2f}", ha="center", va="center", fontsize=6,
                        color="black" if grid[l, j] > mid else "white")  # fmt: skip
    bar = fig.add_axes(((1.15 + tau * cell) / width, 0.6 / height, 0.15 / width, L * cell / height))
    fig.colorbar(image, cax=bar).set_label(f"mean {score}", fontsize=9)
    title = f"{clean(summary['model'])}: mean {clean(score)} over {summary['texts']:,} texts"
    fig.text(0.3 / width, 1 - 0.4 / height, title, fontsize=11, weight="bold", parse_math=False)
    fig.qkv_meta = (title, f"qkv scan of {clean(summary['corpus'])}")
    return fig


def layer_figure(summary: dict, scores: list[str]):
    """Each score's mean over the heads of a layer, layer by layer (one line per score): Clark et al.'s (2019)
    figure of the attention on [CLS], [SEP] and punctuation per layer. A matplotlib Figure."""
    from qkv_cli.views.figures.heatmaps import setup

    setup()
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6.4, 3.8))
    ax = fig.add_axes((0.11, 0.14, 0.62, 0.72))
    for name in scores:
        grid = np.asarray(summary["scores"][name]["mean"], dtype=np.float64)  # (L, tau)
        ax.plot(range(grid.shape[0]), grid.mean(axis=1), marker="o", label=clean(_label(name)))
    ax.set_xlabel("layer", fontsize=9)
    ax.set_ylabel("mean over heads and texts", fontsize=9)
    ax.set_xticks(range(summary["layers"]))
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0), frameon=False)
    title = f"{clean(summary['model'])}: attention mass per layer, {summary['texts']:,} texts"
    fig.text(0.02, 0.93, title, fontsize=11, weight="bold", parse_math=False)
    fig.qkv_meta = (title, f"qkv scan of {clean(summary['corpus'])}")
    return fig


def _label(name: str) -> str:  # to_[SEP] -> on [SEP]; to_, -> on "," (a lone punctuation mark, quoted)
    if not name.startswith("to_"):
        return name
    token = name[3:]
    return f'on "{token}"' if len(token) == 1 and not token.isalnum() else f"on {token}"


def save_heatmap(summary: dict, score: str, path) -> str:
    from qkv_cli.views.figures.heatmaps import save_figure

    save_figure(heatmap_figure(summary, score), path)
    return str(path)


@contextmanager
def progress_bar(total: int | None, skipped: int = 0):
    """A rich progress bar (texts, texts/s, time left) on a terminal's stdout; elsewhere nothing. Yields the
    callback pipeline.scan calls after each shard (or None)."""
    if not sys.stdout.isatty():
        yield None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    columns = (TextColumn("scanning"), BarColumn(), MofNCompleteColumn(),
               TextColumn("{task.fields[rate]} texts/s"), TimeRemainingColumn())  # fmt: skip
    with Progress(*columns, transient=True) as bar:
        task = bar.add_task("scan", total=total, rate="-")

        def update(p) -> None:
            import time

            seconds = max(time.perf_counter() - p.started, 1e-9)
            bar.update(task, completed=p.done + p.skipped, rate=f"{p.done / seconds:.1f}")

        yield update
