"""qkv.compare, the Python door of `qkv compare`: the same numbers as two qkv.run calls subtracted, its figure, its
files, its errors."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from tiny import make_checkpoint

import qkv_cli as qkv


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    folder = tmp_path_factory.mktemp("compare_api")
    return make_checkpoint(folder / "base", "llama", seed=0), make_checkpoint(folder / "tuned", "llama", seed=2)


def test_import_stays_light():
    code = "import sys, qkv_cli as qkv; f = qkv.compare; print('numpy' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_two_texts_equal_two_runs_subtracted():
    a, b = "The cat sat on the mat.", "The big dog sat on the mat."
    c = qkv.compare(a, b, d=16, heads=2, causal=True, seed=3)
    wa = qkv.run(a, d=16, heads=2, causal=True, seed=3).weights
    wb = qkv.run(b, d=16, heads=2, causal=True, seed=3).weights
    ia, ib = [0, 2, 3, 4, 5, 6], [0, 3, 4, 5, 6, 7]
    np.testing.assert_array_equal(c.aligned_a, ia)
    np.testing.assert_array_equal(c.aligned_b, ib)
    np.testing.assert_allclose(c.diff[0], wb[:, ib][:, :, ib] - wa[:, ia][:, :, ia], atol=1e-12)
    assert c.a.tokens == qkv.run(a, d=16, heads=2).tokens and c.mode == "texts"
    rows = c.heads_moved()
    assert len(rows) == 2 and rows[0]["tv"] >= rows[1]["tv"] > 0
    assert "left out A 1 'cat', B 1..2 'big dog'" in c.alignment
    assert "m_A=7 m_B=8, 6 aligned" in repr(c)


def test_two_loaded_models_and_the_figure(pair, tmp_path):
    base, tuned = (qkv.load(str(p)) for p in pair)
    c = qkv.compare("the cat sat on the mat", models=(base, tuned), layer=0)
    ra, rb = qkv.run("the cat sat on the mat", model=base), qkv.run("the cat sat on the mat", model=tuned)
    np.testing.assert_allclose(c.diff, rb.attentions - ra.attentions, atol=1e-12)
    assert c.layers == (0, 1) and c.names == ("base", "tuned")
    fig = c.heatmap(head=1)
    images = [im for ax in fig.axes for im in ax.get_images()]
    assert len(images) == 3  # A, B and B - A
    np.testing.assert_allclose(images[2].get_array(), c.diff[0, 1])  # layer=0 is the layer drawn
    lo, hi = images[2].get_clim()
    assert lo == -hi and images[2].get_cmap().name.startswith("RdBu")  # diverging, centred on 0
    path = c.save_npz(tmp_path / "c.npz")
    with np.load(path) as z:
        np.testing.assert_array_equal(z["tv"], c.tv)


@pytest.mark.parametrize(
    "call,fragment",
    [
        (lambda: qkv.compare("a b"), "two texts"),
        (lambda: qkv.compare("a b", models=("x",)), "two models"),
        (lambda: qkv.compare("a b", "a c", models=("x", "y")), "one text and models="),
        (lambda: qkv.compare("a b", 3), "texts must be str"),
        (lambda: qkv.compare("a b", "a c", model=3), "model must be"),
        (lambda: qkv.compare("a b", "a c", layer=1), "--layer needs --model"),
        (lambda: qkv.compare("a b", "a c", d=8, heads=2).heatmap(head=5), "head 5 does not exist"),
    ],
)
def test_errors_are_qkv_errors(call, fragment):
    with pytest.raises(qkv.QkvError, match=fragment):
        call()
