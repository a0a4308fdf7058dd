"""Figures as a person sees them: titles inside the figure, near-square grids, readable and thinned labels, legends
only for what is drawn, metadata in the file, editable SVG text, any script without a stack of warnings."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
from clitools import invoke
from tiny import make_checkpoint

from qkv_cli.views.figures import heatmaps as figures

QKV = str(Path(sys.executable).with_name("qkv"))


def panels(k=4, m=6, masked=False):
    rng = np.random.default_rng(0)
    w = rng.random((m, m))
    w /= w.sum(axis=1, keepdims=True)
    mask = np.triu(np.ones((m, m), dtype=bool), 1) if masked else np.zeros((m, m), dtype=bool)
    return [(f"head {j}", np.where(mask, 0.0, w), mask) for j in range(k)]


def rendered(fig):
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    return canvas.get_renderer()


@pytest.mark.parametrize("k, grid", [(1, (1, 1)), (4, (2, 2)), (8, (2, 4)), (9, (3, 3)), (12, (3, 4))])
def test_grids_are_near_square(k, grid):
    assert figures.near_square(k) == grid


@pytest.mark.parametrize("k", [1, 4])
def test_every_text_lies_inside_the_figure(k):
    labels = [f"token{i}" for i in range(6)]
    subtitle = "m=6 d=64 tau=4 " + "a long settings line that must wrap, not be clipped " * 4
    title = "Attention weights: 4 heads, causal" if k > 1 else "Attention weights: head 2, causal, window n_c=3"
    fig = figures.draw_grid(panels(k), labels, labels, title, subtitle)
    renderer = rendered(fig)
    box = fig.bbox
    texts = list(fig.texts) + [ax.title for ax in fig.axes] + [t for ax in fig.axes for t in ax.texts]
    assert len(fig.texts) >= 3  # the title and a subtitle wrapped over two or more lines
    for text in texts:
        if not text.get_text():
            continue
        extent = text.get_window_extent(renderer)
        assert box.x0 - 1 <= extent.x0 and extent.x1 <= box.x1 + 1, text.get_text()
        assert box.y0 - 1 <= extent.y0 and extent.y1 <= box.y1 + 1, text.get_text()


def test_long_labels_end_in_an_ellipsis_and_thinned_labels_carry_positions():
    _, short = figures.tick_labels(["x" * 60, "cat"])
    assert len(short[0]) <= figures.MAX_LABEL and short[0].endswith("…") and short[1] == "cat"
    idx, many = figures.tick_labels([f"w{i}" for i in range(200)])
    assert len(idx) <= figures.MAX_TICKS and idx[0] == 0
    assert all(label.split(" ", 1)[0] == str(i) for i, label in zip(idx, many, strict=True))


@pytest.mark.parametrize("masked", [False, True])
def test_the_colour_bar_mentions_masked_cells_only_when_there_are_some(masked):
    labels = [str(i) for i in range(6)]
    fig = figures.draw_grid(panels(masked=masked), labels, labels, "t")
    colorbar = fig.axes[-1]
    assert ("masked" in colorbar.get_ylabel()) == masked


@pytest.mark.parametrize("scale, norm", [("linear", "Normalize"), ("sqrt", "PowerNorm"), ("log", "LogNorm")])
def test_colour_scales(scale, norm):
    labels = [str(i) for i in range(6)]
    fig = figures.draw_grid(panels(1), labels, labels, "t", scale=scale)
    assert type(fig.axes[0].images[0].norm).__name__ == norm


def test_the_cli_colour_scale_choices_are_the_figure_scales():
    from qkv_cli.cli.commands import ColorScale

    assert tuple(c.value for c in ColorScale) == figures.SCALES


def test_png_title_names_a_single_head_and_carries_the_settings(tmp_path):
    from PIL import Image

    out = tmp_path / "one.png"
    result = invoke(["heatmap", "the cat sat on the mat", "--heads", "4", "--d", "16", "--head", "2", "--causal",
                     "--color-scale", "sqrt", "--out", out])  # fmt: skip
    assert result.exit_code == 0, result.output
    with Image.open(out) as image:
        meta = image.text
    assert "head 2" in meta["Title"] and "heads" not in meta["Title"], meta
    assert "causal" in meta["Title"] and "tau=4" in meta["Description"], meta


def test_svg_text_is_editable_and_pdf_has_metadata(tmp_path):
    for suffix in ("svg", "pdf"):
        out = tmp_path / f"w.{suffix}"
        result = invoke(["heatmap", "the cat sat", "--heads", "2", "--d", "8", "--out", out])
        assert result.exit_code == 0, result.output
        data = out.read_bytes()
        if suffix == "svg":
            assert b"<text" in data and b"Attention weights" in data  # text, not glyph paths
        else:
            assert b"/Title" in data and b"qkv" in data


def test_repeated_layer_draws_a_layer_by_head_grid(tmp_path):
    from PIL import Image

    folder = make_checkpoint(tmp_path / "gpt2", "gpt2")
    out = tmp_path / "grid.png"
    result = invoke(["heatmap", "the cat sat", "--model", folder, "--layer", "0", "--layer", "1", "--out", out])
    assert result.exit_code == 0, result.output
    with Image.open(out) as image:
        assert "layers 0, 1" in image.text["Title"]


@pytest.mark.parametrize("text", ["我爱你 猫 cat", "emoji 🙂 🐈 cat", "$\\frac{$ x^2 $", "\u202eabc \x1b[2J"])
def test_any_script_draws_without_a_stack_of_warnings(text, tmp_path):
    env = {**os.environ, "PYTHONWARNINGS": "default"}
    proc = subprocess.run([QKV, "heatmap", text, "--heads", "2", "--d", "8", "--out", "w.png"], cwd=tmp_path,
                          capture_output=True, text=True, env=env, timeout=120)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert len(proc.stderr.splitlines()) <= 1, proc.stderr  # at most the one line naming undrawable characters
    assert "Warning" not in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert (tmp_path / "w.png").stat().st_size > 1000


def test_drawing_emits_no_python_warning():
    labels = ["我", "🙂", "$x$", "a" * 40, "cat", "."]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fig = figures.draw_grid(panels(2), labels, labels, "t")
        rendered(fig)
