"""The heatmaps of `qkv patch --out`: one panel per --what, the recovery of every patch, layer x position (resid,
attn, mlp) or layer x head (heads, q, k, v, pattern), on a diverging map centred on 0 (red: recovers the answer)."""

from __future__ import annotations

import numpy as np

from qkv_cli.pipeline.patch.result import Patching
from qkv_cli.views.console import clean


def draw(p: Patching):
    """A matplotlib Figure: the panels side by side, layers down, positions or heads across, one colour bar."""
    from qkv_cli.views.figures.heatmaps import setup, tick_labels

    setup()
    from matplotlib import colormaps
    from matplotlib.colors import Normalize
    from matplotlib.figure import Figure

    size = max(1.0, max(float(np.abs(p.recovery[w]).max()) for w in p.what))
    norm = Normalize(-size, size)
    cmap = colormaps["RdBu_r"]
    widths = [min(6.0, max(1.6, 0.3 * p.recovery[w].shape[1])) for w in p.what]
    height = min(8.0, max(2.4, 0.22 * p.n_layers))
    margin = 1.5
    width = sum(widths) + margin * len(p.what) + 1.2
    fig = Figure(figsize=(width, height + 2.0))
    x = margin
    image = None
    for w, wide in zip(p.what, widths, strict=True):
        ax = fig.add_axes((x / width, 1.3 / (height + 2.0), wide / width, height / (height + 2.0)))
        image = ax.imshow(p.recovery[w], cmap=cmap, norm=norm, interpolation="nearest", aspect="auto")
        idx, short = tick_labels([clean(s) for s in p.column_labels(w)])
        ax.set_xticks(idx, short, rotation=90, fontsize=max(5.0, min(8.0, 160 / max(len(short), 1))))
        rows = p.recovery[w].shape[0]
        ax.set_yticks(range(0, rows, max(1, rows // 10)))  # whole layers, also for a model of one layer
        stack = "" if p.side is None else ("encoder " if p.side == "encoder" else "decoder ")
        ax.set_ylabel(f"{stack}layer", fontsize=9)
        ax.set_title(w, fontsize=11)
        x += wide + margin
    bar = fig.add_axes(((x - margin + 0.3) / width, 1.3 / (height + 2.0), 0.15 / width, height / (height + 2.0)))
    fig.colorbar(image, cax=bar).set_label("recovery (0 corrupted, 1 clean)", fontsize=9)
    title = f"{clean(p.model)}: activation patching, {p.direction}, {p.metric}"
    title += "" if p.side is None else f", --attention {p.side}"
    names = f"clean: {clean(p.clean)}   corrupted: {clean(p.corrupted)}"
    fig.text(0.3 / width, 1 - 0.35 / (height + 2.0), title, fontsize=13, weight="bold", parse_math=False)
    fig.text(0.3 / width, 1 - 0.65 / (height + 2.0), names[:160], fontsize=8.5, color="#555555", parse_math=False)
    fig.qkv_meta = (title, names)
    return fig


def save(p: Patching, path) -> str:
    from qkv_cli.views.figures.heatmaps import save_figure

    save_figure(draw(p), path)
    return str(path)
