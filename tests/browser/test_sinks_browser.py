"""The page of a model with attention sinks (a tiny gpt_oss that transformers built): the weights it shows equal the
run's (rows summing to less than 1), and a cell's numbers give its row's sink share."""

from __future__ import annotations

import numpy as np
import pytest
from typer.testing import CliRunner

pytestmark = [pytest.mark.browser, pytest.mark.reference]


def test_page_shows_each_rows_sink_share(viewer, tmp_path):
    from decoders import build
    from helpers import reference_import

    from qkv_cli.cli import app
    from qkv_cli.models import load_model

    folder = tmp_path / "gpt_oss"
    build(reference_import("transformers"), reference_import("torch"), "gpt_oss", folder)
    text = "the cat sat on the mat"
    r = CliRunner().invoke(app, ["view", text, "--model", str(folder), "--layer", "1", "-o", str(tmp_path / "p.html")])
    assert r.exit_code == 0, r.output
    run = load_model(folder, dtype="float32").run(text)
    v = viewer(tmp_path / "p.html")
    assert np.abs(v.weights() - run.attentions).max() <= 2e-3  # rows summing to 1 - sink share
    v.js("window.qkvView.select({layer: 1, head: 2, view: 'matrix'})")
    v.page.focus("#mx")
    for key in ("ArrowDown", "ArrowDown"):
        v.page.keyboard.press(key)
    i = v.js("window.qkvView.state()")["cell"]["i"]
    assert f"sink share of this row {run.sinks[1, 2, i]:.4f}" in v.page.inner_text("#tip")
    assert "attention sinks" in v.page.inner_text("#matrix-caption")
    v.clean()
