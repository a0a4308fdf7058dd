"""Heatmaps with matplotlib's object API (Figure + Agg canvas; no pyplot, so start-up stays short)."""

from __future__ import annotations

import math

import numpy as np

from qkv_cli.errors import QkvError
from qkv_cli.views.files import atomic_write, check_output_path

FORMATS = (".png", ".svg", ".pdf")
MAX_TICKS = 40
MAX_PANELS = 16  # each panel takes about 0.3 s to lay out and draw: 64 heads would take 20 s, 1024 minutes


def check_image_path(path: str, panels: int = 1) -> None:
    """Before any work: the image can be written, and the grid is not too large to draw."""
    check_output_path(path, FORMATS)
    check_panels(panels)


def check_panels(k: int) -> None:
    """Refuse, before any work, a grid with more panels than can be drawn in a few seconds."""
    if k > MAX_PANELS:
        raise QkvError(f"a heatmap of {k} heads is too many panels (at most {MAX_PANELS}): choose heads with --head, "
                       "e.g. --head 0 --head 1")  # fmt: skip


def _ticks(ax, row_labels, col_labels):
    for labels, set_ticks, set_labels, rotation in (
        (col_labels, ax.set_xticks, ax.set_xticklabels, 90),
        (row_labels, ax.set_yticks, ax.set_yticklabels, 0),
    ):
        step = max(1, math.ceil(len(labels) / MAX_TICKS))
        idx = list(range(0, len(labels), step))
        set_ticks(idx)
        set_labels([labels[i] for i in idx], rotation=rotation, fontsize=7)


def draw_grid(panels, row_labels, col_labels, title, ncols=4):
    """panels: list of (subtitle, weights (m, n), masked (m, n) bool). Returns a Figure."""
    from matplotlib import colormaps
    from matplotlib.figure import Figure

    k = len(panels)
    check_panels(k)
    ncols = min(ncols, k)
    nrows = math.ceil(k / ncols)
    m, n = panels[0][1].shape
    cell = min(0.35, 9.0 / max(m, n, 1))
    side = max(2.6, cell * max(m, n) + 1.2)
    fig = Figure(figsize=(ncols * side + 1.2, nrows * side + 0.9), layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False)
    cmap = colormaps["viridis"].with_extremes(bad="#d9d9d9")
    image = None
    for ax, (subtitle, weights, masked) in zip(axes.flat, panels, strict=False):
        data = np.ma.masked_array(weights, mask=masked)
        image = ax.imshow(data, cmap=cmap, vmin=0.0, vmax=1.0, interpolation="nearest", aspect="auto")
        if masked.any():
            ys, xs = np.nonzero(masked)
            if len(xs) <= 4000:
                ax.scatter(xs, ys, marker="x", s=max(2.0, 60.0 / max(m, n)), c="#7f7f7f", linewidths=0.6)
        ax.set_title(subtitle, fontsize=9)
        ax.set_xlabel("keys", fontsize=8)
        ax.set_ylabel("queries", fontsize=8)
        _ticks(ax, row_labels, col_labels)
    for ax in list(axes.flat)[k:]:
        ax.set_axis_off()
    fig.colorbar(image, ax=axes, shrink=0.8, label="attention weight (grey x = masked)")
    fig.suptitle(title, fontsize=10)
    return fig


def draw_model_view(attentions, heads, masked, title, kinds=None):
    """attentions (L, k, m, n) as one mosaic: layers down, heads across, one m x n tile each (no token labels).
    masked: (L, m, n) bool per layer; kinds: a label per layer (e.g. "sliding", "full") or None.

    One image instead of L x k axes keeps a 6 x 12 grid fast to draw."""
    from matplotlib import colormaps
    from matplotlib.figure import Figure

    L, k, m, n = attentions.shape
    gap = max(1, max(m, n) // 8)
    mosaic = np.full((L * (m + gap) - gap, k * (n + gap) - gap), np.nan)
    for l in range(L):
        for c in range(k):
            tile = np.where(masked[l], np.nan, attentions[l, c])
            mosaic[l * (m + gap) : l * (m + gap) + m, c * (n + gap) : c * (n + gap) + n] = tile
    fig = Figure(figsize=(min(24.0, 1.0 * k + 2.0), min(24.0, 1.0 * L + 1.2)), layout="constrained")
    ax = fig.subplots()
    cmap = colormaps["viridis"].with_extremes(bad="white")
    image = ax.imshow(np.ma.masked_invalid(mosaic), cmap=cmap, vmin=0.0, vmax=1.0, interpolation="nearest",
                      aspect="auto")  # fmt: skip
    ax.set_xticks([c * (n + gap) + n / 2 - 0.5 for c in range(k)], [f"head {j}" for j in heads], fontsize=7)
    names = [f"layer {l}" + (f" ({kinds[l]})" if kinds else "") for l in range(L)]
    ax.set_yticks([l * (m + gap) + m / 2 - 0.5 for l in range(L)], names, fontsize=7)
    ax.tick_params(length=0)
    for side in ax.spines.values():
        side.set_visible(False)
    fig.colorbar(image, ax=ax, shrink=0.6, label="attention weight (masked cells blank)")
    fig.suptitle(title, fontsize=9)
    return fig


def save_figure(fig, path) -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    p = check_output_path(path, FORMATS)
    FigureCanvasAgg(fig)
    with atomic_write(p) as handle:
        fig.savefig(handle, format=p.suffix.lower().lstrip("."), dpi=120)
