"""The floating-point error state is owned in one place for a whole command or API call: NumPy's overflow and
invalid-value warnings never reach stderr, beside a correct one-line error or after a successful run, and the
page never stores a finite score as inf."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings

import numpy as np
import pytest
from tiny import make_checkpoint

from qkv_cli.errors import QkvError
from qkv_cli.views.page import data as html_data


def times(factor):
    def edit(tensors):
        for name in tensors:
            if tensors[name].dtype == np.float32 and "LayerNorm" not in name:
                tensors[name] = tensors[name] * np.float32(factor)

    return edit


def wide_query(tensors):  # an F64 tensor whose values float32 cannot hold
    key = "encoder.layer.0.attention.self.query.weight"
    tensors[key] = np.full(tensors[key].shape, 1e300)


def qkv(*args):
    env = {**os.environ, "RUST_BACKTRACE": "0"}
    return subprocess.run([sys.executable, "-m", "qkv_cli", *map(str, args)], capture_output=True, text=True,
                          timeout=120, env=env)  # fmt: skip


@pytest.mark.parametrize("edit,dtype,fragment", [(times(1e30), "float32", "layer 0"),
                                                 (wide_query, "float32", "non-finite")])  # fmt: skip
def test_one_line_and_no_warning(edit, dtype, fragment, tmp_path):
    folder = make_checkpoint(tmp_path / "m", "bert", tensor_edit=edit)
    done = qkv("run", "the cat sat", "--model", folder, "--dtype", dtype)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("qkv: error: ") and fragment in lines[0], lines
    assert "Warning" not in done.stderr


def test_view_of_huge_scores_succeeds_quietly_and_stores_no_inf(tmp_path):
    folder = make_checkpoint(tmp_path / "m", "bert", tensor_edit=times(1e30))
    page = tmp_path / "p.html"
    done = qkv("view", "the cat sat", "--model", folder, "--dtype", "float64", "-o", page)
    assert done.returncode == 0, done.stderr
    assert done.stderr.startswith("wrote ") and len(done.stderr.splitlines()) == 1, done.stderr  # only the size line
    html = page.read_text()
    assert '"beyond"' in html and '"top"' not in html


def test_page_layer_keeps_weights_only_where_scores_do_not_fit():
    masked = np.zeros((1, 3), dtype=bool)
    weights = np.array([[[1.0, 0.0, 0.0]]])
    for scores in ([[[1e60, 0.0, -1e60]]], [[[1e5, 0.0, 0.0]]]):  # a row max beyond float32; a gap beyond float16
        entry = html_data.layer(weights, np.array(scores), masked)
        assert entry.get("beyond") is True and "top" not in entry and "s" not in entry and "w" in entry
    entry = html_data.layer(weights, np.array([[[30.0, 0.0, -30.0]]]), masked)
    assert "beyond" not in entry and "top" in entry  # an ordinary row keeps its scores


def test_api_call_raises_without_a_warning(tmp_path):
    import qkv_cli as api

    folder = make_checkpoint(tmp_path / "m", "bert", tensor_edit=times(1e30))
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with pytest.raises(QkvError, match="layer 0"):
            api.run("the cat sat", model=str(folder), dtype="float32")
        np.float32(1e30) * np.float32(1e30)  # outside the call, NumPy's own state applies again
    assert [str(w.message) for w in seen] == ["overflow encountered in scalar multiply"]
