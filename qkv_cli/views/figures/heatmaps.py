"""Heatmaps with matplotlib's object API (Figure + Agg canvas; no pyplot, so start-up stays short).

Layout by hand (no constrained layout: it is slow and gives up on long labels): panels in a near-square grid, token
labels on the outer panels only, thinned with their positions on long texts, the colour bar right beside the
panels; a short title, the settings in a smaller wrapped subtitle and in the file's metadata. Text is plain text
(no mathtext: a token such as `$\\frac{$` is just characters) and editable in SVG.
"""

from __future__ import annotations

import math
import sys
import textwrap
from typing import TYPE_CHECKING

import numpy as np

from qkv_cli.errors import QkvError
from qkv_cli.views.export.writing import atomic_write, check_output_path

if TYPE_CHECKING:  # the type the figures are, for hints (matplotlib itself is imported where a figure is drawn)
    from matplotlib.figure import Figure  # noqa: F401

FORMATS = (".png", ".svg", ".pdf")
SCALES = ("linear", "sqrt", "log")
MAX_TICKS = 40
MAX_PANELS = 16  # more panels take many seconds to lay out and draw: choose heads with --head
MAX_LABEL = 14  # characters of a tick label; longer ones end in an ellipsis


def check_image_path(path: str, panels: int = 1) -> None:
    """Before any work: the image can be written, and the grid is not too large to draw."""
    check_output_path(path, FORMATS)
    check_panels(panels)


def check_panels(k: int) -> None:
    """Refuse, before any work, a grid with more panels than can be drawn in a few seconds."""
    if k > MAX_PANELS:
        raise QkvError(f"a heatmap of {k} panels is too many (at most {MAX_PANELS}): choose heads with --head, "
                       "e.g. --head 0 --head 1, or fewer --layer")  # fmt: skip


def near_square(k: int) -> tuple[int, int]:
    """(rows, columns) for k panels: 4 -> 2 x 2, 8 -> 2 x 4, 12 -> 3 x 4."""
    rows = max(1, int(math.isqrt(k)))
    return rows, math.ceil(k / rows)


def tick_labels(labels, limit: int = MAX_TICKS) -> tuple[list[int], list[str]]:
    """Positions and labels to show: all of them, or every k-th with its position when there are too many."""
    from qkv_cli.views.figures.fonts import drawable

    step = max(1, math.ceil(len(labels) / limit))
    idx = list(range(0, len(labels), step))
    short = [_short(drawable(str(labels[i]))) for i in idx]
    return idx, short if step == 1 else [f"{i} {s}" for i, s in zip(idx, short, strict=True)]


def _short(label: str) -> str:
    from qkv_cli.views.console import clean

    label = clean(label.replace("\n", "⏎").replace("\t", "⇥"))
    return label if len(label) <= MAX_LABEL else label[: MAX_LABEL - 1] + "…"


def setup() -> None:
    """Before matplotlib draws anything: a quiet, writable configuration, fonts with the glyphs, editable SVG text."""
    from qkv_cli.views.figures.fonts import families, no_setter_docs, quiet_matplotlib

    quiet_matplotlib()
    import matplotlib

    if "matplotlib.figure" not in sys.modules:
        with no_setter_docs():  # every module whose Artist classes a figure here uses
            from matplotlib import collections, colorbar, figure, image, patches  # noqa: F401
            from matplotlib.backends import backend_agg  # noqa: F401
    matplotlib.rcParams["font.family"] = list(families())
    matplotlib.rcParams["svg.fonttype"] = "none"


def title_width(title: str) -> float:  # inches a 15 pt bold title needs, with the margins around it
    return 0.9 + len(title) * 15 * 0.66 / 72


def wrap_subtitle(subtitle: str, width: float) -> list[str]:  # the 8.5 pt settings line, wrapped to the figure
    return textwrap.wrap(subtitle, max(20, int((width - 0.9) * 72 / (8.5 * 0.6)))) if subtitle else []


def norm(scale: str):
    from matplotlib.colors import LogNorm, Normalize, PowerNorm

    if scale not in SCALES:
        raise QkvError(f"unknown colour scale {scale!r}: choose one of {', '.join(SCALES)}")
    return {"linear": Normalize(0.0, 1.0), "sqrt": PowerNorm(0.5, 0.0, 1.0), "log": LogNorm(1e-4, 1.0)}[scale]


def draw_grid(panels, row_labels, col_labels, title, subtitle="", scale="linear", grid=None, settings=None):
    """panels: (name, weights (m, n), masked (m, n) bool) each; grid: (rows, columns), else near square;
    settings: the line the file's metadata keeps (default the subtitle). views.figures.style's current style may replace
    the title and subtitle, and sets the colour map, the dpi and the printed weights (--annotate).

    Every panel is an image in one Axes that covers the figure (data coordinates are inches), with its labels as
    plain texts: one Axes per panel with tick objects took most of the drawing time (about 0.6 s for 8 heads)."""
    setup()
    from matplotlib import colormaps
    from matplotlib.collections import LineCollection
    from matplotlib.figure import Figure
    from matplotlib.patches import Rectangle

    from qkv_cli.views.figures import style

    k = len(panels)
    check_panels(k)
    rows, cols = grid or near_square(k)
    m, n = panels[0][1].shape
    style.check_annotate(m, n)
    look = style.current()
    settings = subtitle if settings is None else settings
    title, subtitle = style.title_of(title), style.subtitle_of(subtitle)
    cell = min(0.32, max(0.07, 4.2 / max(m, n, 1)))
    pw, ph = max(2.4 * n / max(m, n), cell * n), max(2.4 * m / max(m, n), cell * m)
    fs = min(11.0, max(5.5, cell * 72 * 0.72))  # tick labels: as large as a cell allows
    ys, ylab = tick_labels(row_labels)
    xs, xlab = tick_labels(col_labels)
    left = max(len(s) for s in ylab) * fs * 0.66 / 72 + 0.55
    bottom = max(len(s) for s in xlab) * fs * 0.66 / 72 + 0.5
    gap, head_h, bar = 0.25, 0.32, 1.15
    width = max(left + cols * pw + (cols - 1) * gap + bar, title_width(title))
    lines = wrap_subtitle(subtitle, width)
    lead = 0.62 if title else 0.38  # the first subtitle line's baseline: where the title would be, when it is none
    top = lead - 0.07 + 0.17 * len(lines)
    height = top + rows * (ph + head_h) + (rows - 1) * gap + bottom
    fig = Figure(figsize=(width, height), dpi=look.dpi)
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set_axis_off()
    cmap = colormaps[look.cmap].with_extremes(bad="#d9d9d9")
    label_w = max(len(s) for s in ylab) * fs * 0.6 / 72  # the longest row label's width, about
    tick = 2 / 72  # a tick mark: 2 points
    marks, crosses = [], ([], [])
    any_masked = False
    image = None
    text = {"fontsize": fs, "parse_math": False}
    for idx, (name, weights, masked) in enumerate(panels):
        r, c = divmod(idx, cols)
        x0 = left + c * (pw + gap)
        y0 = height - top - head_h - r * (ph + head_h + gap) - ph  # the panel's lower edge
        data = np.ma.masked_array(np.maximum(weights, 1e-4) if scale == "log" else weights, mask=masked)
        image = ax.imshow(data, cmap=cmap, norm=norm(scale), interpolation="nearest", aspect="auto",
                          extent=(x0, x0 + pw, y0, y0 + ph))  # fmt: skip
        ax.add_patch(Rectangle((x0, y0), pw, ph, fill=False, linewidth=0.8, edgecolor="black"))
        if masked.any():
            any_masked = True
            yy, xx = np.nonzero(masked)
            if len(xx) <= 4000:
                crosses[0].extend(x0 + (xx + 0.5) * pw / n)
                crosses[1].extend(y0 + ph - (yy + 0.5) * ph / m)
        if look.annotate:
            style.annotate(ax, weights, masked, (x0, y0, pw, ph), image)
        if name:  # a long panel title (a layer's kind) gets smaller rather than run into its neighbour
            size = min(11.0, (pw + gap * 0.8) * 72 / (0.6 * len(name)))
            ax.text(x0 + pw / 2, y0 + ph + 0.07, name, ha="center", va="baseline", fontsize=size, parse_math=False)
        if c == 0:  # row labels on the first column, the column labels under the lowest panel of each column
            for i, label in zip(ys, ylab, strict=True):
                y = y0 + ph - (i + 0.5) * ph / m
                marks.append(((x0 - tick, y), (x0, y)))
                ax.text(x0 - tick - 0.03, y, label, ha="right", va="center", **text)
            ax.text(
                max(0.05, x0 - tick - 0.1 - label_w),
                y0 + ph / 2,
                "queries",
                rotation=90,
                ha="right",
                va="center",
                fontsize=10,
            )  # just left of its labels
        if r == rows - 1 or idx + cols >= k:
            for t, label in zip(xs, xlab, strict=True):
                x = x0 + (t + 0.5) * pw / n
                marks.append(((x, y0 - tick), (x, y0)))
                ax.text(x, y0 - tick - 0.03, label, rotation=90, ha="center", va="top", **text)
            label_h = max(len(s) for s in xlab) * fs * 0.6 / 72
            ax.text(
                x0 + pw / 2, max(0.05, y0 - tick - 0.1 - label_h), "keys", ha="center", va="top", fontsize=10
            )  # just under its labels
    ax.add_collection(LineCollection(marks, colors="black", linewidths=0.8))
    if crosses[0]:
        ax.scatter(*crosses, marker="x", s=max(2.0, 50.0 / max(m, n)), c="#7f7f7f", linewidths=0.6)
    ax.set_xlim(0, width)
    ax.set_ylim(0, height)
    bar_x = left + cols * pw + (cols - 1) * gap + 0.15
    bar_h = min(rows * (ph + head_h) + (rows - 1) * gap - head_h, 4.0)
    cax = fig.add_axes((bar_x / width, (height - top - head_h - bar_h) / height, 0.16 / width, bar_h / height))
    label = "attention weight" + (" (grey x = masked)" if any_masked else "")
    fig.colorbar(image, cax=cax).set_label(label, fontsize=10)
    fig.text(0.45 / width, 1 - 0.38 / height, title, fontsize=15, weight="bold", va="baseline", parse_math=False)
    for i, line in enumerate(lines):
        fig.text(0.45 / width, 1 - (lead + 0.17 * i) / height, line, fontsize=8.5, color="#555555",
                 va="baseline", parse_math=False)  # fmt: skip
    fig.qkv_meta = (title, settings)
    return fig


def draw_model_view(attentions, heads, masked, title, kinds=None, subtitle="", scale="linear", settings=None):
    """attentions (L, k, m, n) as one mosaic: layers down, heads across, one m x n tile each (no token labels).
    masked: (L, m, n) bool per layer; kinds: a label per layer (e.g. "sliding", "full") or None.

    One image instead of L x k axes keeps a 30 x 9 grid fast to draw."""
    setup()
    from matplotlib import colormaps
    from matplotlib.figure import Figure

    from qkv_cli.views.figures import style

    if style.current().annotate:
        raise QkvError("--annotate prints weights in one layer's panels, not in the model view of every layer: "
                       "give --layer")  # fmt: skip
    look = style.current()
    settings = subtitle if settings is None else settings
    title, subtitle = style.title_of(title), style.subtitle_of(subtitle)
    L, k, m, n = attentions.shape
    gap = max(1, max(m, n) // 8)
    mosaic = np.full((L * (m + gap) - gap, k * (n + gap) - gap), np.nan)
    for l in range(L):
        for c in range(k):
            tile = np.where(masked[l], np.nan, attentions[l, c])
            mosaic[l * (m + gap) : l * (m + gap) + m, c * (n + gap) : c * (n + gap) + n] = tile
    width, height = max(min(24.0, 0.9 * k + 3.2), title_width(title)), min(30.0, 0.55 * L + 1.8)
    lines = wrap_subtitle(subtitle, width)
    fig = Figure(figsize=(width, height + 0.17 * len(lines)), dpi=look.dpi)
    H = height + 0.17 * len(lines)
    top = 0.55 + 0.17 * len(lines)
    ax = fig.add_axes((1.9 / width, 0.55 / H, (width - 3.1) / width, (H - top - 0.75) / H))
    cmap = colormaps[look.cmap].with_extremes(bad="white")
    data = np.ma.masked_invalid(np.maximum(mosaic, 1e-4) if scale == "log" else mosaic)
    image = ax.imshow(data, cmap=cmap, norm=norm(scale), interpolation="nearest", aspect="auto")
    ax.set_xticks([c * (n + gap) + n / 2 - 0.5 for c in range(k)], [f"head {j}" for j in heads], fontsize=9)
    names = [f"layer {l}" + (f" ({kinds[l]})" if kinds else "") for l in range(L)]
    ax.set_yticks([l * (m + gap) + m / 2 - 0.5 for l in range(L)], names, fontsize=9)
    ax.xaxis.tick_top()
    ax.tick_params(length=0)
    for side in ax.spines.values():
        side.set_visible(False)
    cax = fig.add_axes(((width - 1.05) / width, 0.55 / H, 0.16 / width, (H - top - 0.75) / H))
    fig.colorbar(image, cax=cax).set_label("attention weight (masked cells blank)", fontsize=10)
    fig.text(0.3 / width, 1 - 0.38 / H, title, fontsize=15, weight="bold", parse_math=False)
    for i, line in enumerate(lines):
        fig.text(0.3 / width, 1 - (0.62 + 0.17 * i) / H, line, fontsize=8.5, color="#555555", parse_math=False)
    fig.qkv_meta = (title, settings)
    return fig


def save_figure(fig, path) -> None:
    """Draw to PNG, SVG (editable text) or PDF, with the title and settings in the file's metadata."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from qkv_cli.views.figures.fonts import tell

    p = check_output_path(path, FORMATS)
    kind = p.suffix.lower().lstrip(".")
    title, settings = getattr(fig, "qkv_meta", ("", ""))
    meta = {"png": {"Title": title, "Description": settings, "Software": "qkv"},
            "svg": {"Title": title, "Description": settings},
            "pdf": {"Title": title, "Subject": settings, "Creator": "qkv"}}[kind]  # fmt: skip
    FigureCanvasAgg(fig)
    with atomic_write(p) as handle:
        extra = {"pil_kwargs": {"compress_level": 1}} if kind == "png" else {}  # zlib level 6 took ~0.2 s of 2.5
        fig.savefig(handle, format=kind, dpi=fig.dpi, metadata=meta, **extra)
    tell()
