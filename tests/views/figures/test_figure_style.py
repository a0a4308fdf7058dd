"""Slide-ready figures: --title, --subtitle / --no-subtitle, --dpi, --cmap (perceptual maps only), --annotate;
a subtitle in words (no kernel, no dtype), axis names beside their labels, a layer grid that names each layer."""

from __future__ import annotations

from unittest import mock

import numpy as np
import pytest
from clitools import invoke
from tiny import make_checkpoint

from qkv_cli.errors import QkvError
from qkv_cli.views.figures import heatmaps as figures
from qkv_cli.views.figures.style import FigureStyle, styled


def texts_of(fig) -> list[str]:
    return [t.get_text() for t in fig.texts] + [t.get_text() for ax in fig.axes for t in ax.texts]


def drawn(args, tmp_path):
    """The Figure `qkv heatmap ARGS` saves (caught before it is written)."""
    got = []
    with mock.patch.object(figures, "save_figure", lambda fig, path: got.append(fig)):
        result = invoke(["heatmap", *args, "--out", str(tmp_path / "f.png")])
    assert result.exit_code == 0, result.output
    return got[-1]


def test_the_default_subtitle_says_in_words_what_a_slide_reader_needs(tmp_path):
    fig = drawn(["the cat sat on", "--causal", "--heads", "2", "--d", "8"], tmp_path)
    words = " ".join(t.get_text() for t in fig.texts[1:])
    assert "kernel" not in words and "float64" not in words and "d_k=" not in words, words
    assert "each token sees itself and the tokens before it" in words, words
    assert "all 2 heads" in words and "4 tokens" in words, words
    assert "kernel=vectorized" in fig.qkv_meta[1]  # the settings stay in the file's metadata


def test_title_and_subtitle_replace_qkvs_and_can_be_none(tmp_path):
    fig = drawn(["the cat sat", "--heads", "2", "--d", "8", "--title", "Slide 3", "--subtitle", "my words"], tmp_path)
    assert fig.texts[0].get_text() == "Slide 3" and fig.texts[1].get_text() == "my words"
    assert fig.qkv_meta[0] == "Slide 3"
    for none in (["--no-subtitle"], ["--subtitle", ""]):
        fig = drawn(["the cat sat", "--heads", "2", "--d", "8", *none], tmp_path)
        assert len(fig.texts) == 1, texts_of(fig)  # the title only


def test_dpi_sets_the_pngs_resolution(tmp_path):
    from PIL import Image

    sizes = {}
    for dpi in (100, 200):
        out = tmp_path / f"{dpi}.png"
        assert (
            invoke(["heatmap", "the cat sat", "--heads", "2", "--d", "8", "--dpi", str(dpi), "--out", out]).exit_code
            == 0
        )
        with Image.open(out) as image:
            sizes[dpi] = image.size
    assert abs(sizes[200][0] / sizes[100][0] - 2) < 0.05, sizes


def test_cmap_takes_perceptual_maps_and_refuses_others_in_one_line(tmp_path):
    fig = drawn(["the cat sat", "--heads", "2", "--d", "8", "--cmap", "magma"], tmp_path)
    image = next(a for a in fig.axes[0].get_images())
    assert image.get_cmap().name.startswith("magma")
    result = invoke(["heatmap", "the cat sat", "--cmap", "jet", "--out", str(tmp_path / "j.png")])
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1, result.output
    with pytest.raises(QkvError, match="perceptually uniform"):
        FigureStyle(cmap="jet")


def test_annotate_prints_each_allowed_weight_and_refuses_big_panels_in_one_line(tmp_path):
    fig = drawn(["the cat sat", "--heads", "2", "--d", "8", "--causal", "--head", "1", "--annotate"], tmp_path)
    numbers = [t for t in texts_of(fig) if t.replace(".", "").isdigit() and "." in t]
    assert len(numbers) == 6, numbers  # 3 x 3, the 3 masked cells left blank
    long_text = " ".join(["cat"] * 30)
    result = invoke(["heatmap", long_text, "--annotate", "--out", str(tmp_path / "a.png")])
    assert result.exit_code == 2 and "at most 24 x 24" in result.output, result.output
    assert len(result.output.strip().splitlines()) == 1
    assert not (tmp_path / "a.png").exists()


def test_annotate_on_a_big_panel_is_refused_before_the_run(tmp_path, monkeypatch):
    from qkv_cli.api import commands

    def never(*args, **kwargs):
        raise AssertionError("the text ran")

    monkeypatch.setattr(commands, "execute", never)
    folder = make_checkpoint(tmp_path / "llama", "llama")
    for args in ([" ".join(["cat"] * 30)], ["the cat", "--context", " ".join(["dog"] * 25)],
                 [" ".join(["the cat"] * 15), "--model", str(folder), "--layer", "0"]):  # fmt: skip
        result = invoke(["heatmap", *args, "--annotate", "--out", str(tmp_path / "a.png")])
        assert result.exit_code == 2 and "at most 24 x 24" in result.output, result.output


def test_queries_and_keys_sit_beside_their_labels():
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    m = 5
    rows, cols = ["a", "bb", "the", "x", "y"], ["k0", "k1", "key", "k3", "k4"]
    w = np.full((m, m), 1 / m)
    fig = figures.draw_grid([("", w, np.zeros((m, m), bool))], rows, cols, "t", "")
    renderer = FigureCanvasAgg(fig).get_renderer()
    texts = {t.get_text(): t.get_window_extent(renderer) for t in fig.axes[0].texts}
    inch = fig.dpi
    assert 0 < min(texts[s].x0 for s in rows) - texts["queries"].x1 < 0.3 * inch  # beside the row labels
    assert 0 < min(texts[s].y0 for s in cols) - texts["keys"].y1 < 0.3 * inch  # under the key labels


def test_a_grid_of_layers_that_differ_names_each_layers_mask(tmp_path):
    folder = make_checkpoint(tmp_path / "g3", "gemma3_text")  # layer 0 sliding (n_c = 3), layer 1 full
    fig = drawn(["the cat sat on the mat", "--model", str(folder), "--layer", "0", "--layer", "1", "--head", "0"],
                tmp_path)  # fmt: skip
    names = texts_of(fig)
    assert "layer 0 (sliding window of 3), head 0" in names and "layer 1 (full causal), head 0" in names, names
    assert "the layers differ" in fig.texts[1].get_text()
    gpt2 = make_checkpoint(tmp_path / "gpt2", "gpt2")  # two alike layers: the subtitle says their mask once
    same = drawn(["the cat sat", "--model", str(gpt2), "--layer", "0", "--layer", "1", "--head", "0"], tmp_path)
    assert "layer 0, head 0" in texts_of(same) and "each token sees itself" in " ".join(texts_of(same))


def test_the_python_api_takes_the_same_figure_options():
    import qkv_cli.api as qkv

    w = np.eye(3)
    fig = qkv.heatmap(w, ["a", "b", "c"], title="T", subtitle="S", dpi=150, cmap="cividis", annotate=True)
    assert fig.dpi == 150 and fig.texts[0].get_text() == "T" and fig.texts[1].get_text() == "S"
    assert sum(t == "1.00" for t in texts_of(fig)) == 3
    with pytest.raises(QkvError, match="perceptually uniform"):
        qkv.heatmap(w, cmap="rainbow")
    with styled(None):  # the default style outside any option
        assert figures.draw_grid([("", w, np.zeros((3, 3), bool))], "abc", "abc", "t").dpi == 110


@pytest.mark.parametrize("args, fragment", [(["--dpi", "5"], "dpi 5 is out of range"),
                                            (["--no-subtitle", "--subtitle", "x"], "contradict")])  # fmt: skip
def test_bad_figure_options_are_refused_in_one_line(args, fragment, tmp_path):
    result = invoke(["heatmap", "the cat", *args, "--out", str(tmp_path / "x.png")])
    assert result.exit_code == 2 and fragment in result.output, result.output
    assert len(result.output.strip().splitlines()) == 1
