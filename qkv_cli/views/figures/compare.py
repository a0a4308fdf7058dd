"""The figure of `qkv compare --out`: A's and B's weights of one layer and head beside their difference B - A
(a diverging colour map centred on 0, red where B puts more weight, blue where it puts less)."""

from __future__ import annotations

import numpy as np

from qkv_cli.pipeline.compare import Comparison
from qkv_cli.views.console import clean
from qkv_cli.views.console.compare import diff_labels


def draw(cmp: Comparison, head: int | None = None):
    """A matplotlib Figure: three panels (A, B, B - A), token labels on each, two colour bars."""
    from qkv_cli.views.figures.heatmaps import setup, tick_labels

    setup()
    from matplotlib import colormaps
    from matplotlib.colors import Normalize
    from matplotlib.figure import Figure

    l, j = cmp.layer, cmp.head(head)
    li = cmp.layers.index(l)
    al = cmp.alignment
    both = cmp.masked("a", l)[np.ix_(al.a, al.a)] & cmp.masked("b", l)[np.ix_(al.b, al.b)]
    panels = [("A", cmp.weights_a[li, j], cmp.masked("a", l), cmp.a.labels),
              ("B", cmp.weights_b[li, j], cmp.masked("b", l), cmp.b.labels),
              ("B - A (aligned positions)", cmp.diff[li, j], both, diff_labels(cmp))]  # fmt: skip
    m = max(p[1].shape[0] for p in panels)
    side = min(5.0, max(2.6, 0.24 * m))
    longest = max(len(s) for p in panels for s in tick_labels(p[3])[1])
    margin = 0.35 + longest * 0.075
    width = 3 * (side + margin) + 1.6
    height = side + margin + 1.3
    fig = Figure(figsize=(width, height))
    viridis = colormaps["viridis"].with_extremes(bad="#d9d9d9")
    diverging = colormaps["RdBu_r"].with_extremes(bad="#d9d9d9")
    size = np.abs(cmp.diff[li, j]).max()
    spread = Normalize(-size, size) if size > 0 else Normalize(-1e-12, 1e-12)
    images = []
    for c, (name, grid, masked, labels) in enumerate(panels):
        x0 = (margin + c * (side + margin) + (0.5 if c == 2 else 0.0)) / width
        ax = fig.add_axes((x0, margin / height, side / width, side / height))
        cmap, scale = (diverging, spread) if c == 2 else (viridis, Normalize(0.0, 1.0))
        images.append(ax.imshow(np.ma.masked_array(grid, mask=masked), cmap=cmap, norm=scale,
                                interpolation="nearest", aspect="auto"))  # fmt: skip
        idx, short = tick_labels(labels)
        fs = max(5.0, min(9.0, 200 / max(len(labels), 1)))
        ax.set_xticks(idx, short, rotation=90, fontsize=fs)
        ax.set_yticks(idx, short, fontsize=fs)
        ax.set_title(name, fontsize=11)
        ax.set_xlabel("keys", fontsize=9)
        if c == 0:
            ax.set_ylabel("queries", fontsize=9)
    bar = fig.add_axes(((2 * (side + margin) + 0.05) / width, margin / height, 0.12 / width, side / height))
    fig.colorbar(images[0], cax=bar).set_label("attention weight", fontsize=9)
    bar = fig.add_axes(((3 * (side + margin) + 0.6) / width, margin / height, 0.12 / width, side / height))
    fig.colorbar(images[2], cax=bar).set_label("B - A", fontsize=9)
    where = f"layer {l}, head {j}" if cmp.checkpoint else f"head {j}"
    what = "two texts" if cmp.mode == "texts" else "two models"
    if cmp.mode == "texts" and cmp.checkpoint:
        what = f"{clean(cmp.a.model.name)}: two texts"
    title = f"{what}, {where}: TV {cmp.tv[li, j]:.3f}"
    names = f"A: {clean(cmp.names[0])}   B: {clean(cmp.names[1])}"
    fig.text(0.35 / width, 1 - 0.4 / height, title, fontsize=14, weight="bold", parse_math=False)
    fig.text(0.35 / width, 1 - 0.68 / height, names[:160], fontsize=8.5, color="#555555", parse_math=False)
    fig.qkv_meta = (title, names)
    return fig


def save(cmp: Comparison, path, head: int | None = None) -> str:
    from qkv_cli.views.figures.heatmaps import save_figure

    save_figure(draw(cmp, head), path)
    return str(path)
