"""The page of `qkv compare --page`: A's and B's own pages draw side by side in their frames, each showing the
weights of its own run (checked against two separate runs through the Python API), with nothing fetched and no
error in the console."""

from __future__ import annotations

import numpy as np
import pytest
from pages import open_page
from typer.testing import CliRunner

pytestmark = pytest.mark.browser
WEIGHTS = """() => { const v = window.qkvView, [L, tau, m, n] = v.shape, out = [];
    for (let l = 0; l < L; l++) for (let h = 0; h < tau; h++) for (let i = 0; i < m; i++)
      for (let j = 0; j < n; j++) out.push(v.weight(l, h, i, j));
    return [v.shape, out]; }"""


def test_both_runs_draw_side_by_side(browser, tmp_path):
    import qkv_cli as qkv
    from qkv_cli.cli import app

    a, b = "The cat sat on the mat.", "The big dog sat on the mat."
    path = tmp_path / "compare.html"
    r = CliRunner().invoke(app, ["compare", a, b, "--heads", "4", "--d", "32", "--causal", "--page", str(path)])
    assert r.exit_code == 0, r.output
    page, errors, requests = open_page(browser, path, 1400, 1000)
    page.wait_for_timeout(500)
    frames = [f for f in page.frames if f is not page.main_frame]
    assert len(frames) == 2
    for frame, text in zip(frames, (a, b), strict=True):
        frame.wait_for_function("window.qkvView && window.qkvView.ready", timeout=20_000)
        shape, flat = frame.evaluate(WEIGHTS)
        want = qkv.run(text, heads=4, d=32, causal=True).weights  # (tau, m, m), a run of its own
        assert tuple(shape)[1:] == want.shape
        assert np.abs(np.array(flat).reshape(shape)[0] - want).max() <= 2e-3  # the page's 12-bit weights
    assert "B - A" in page.inner_text("h1") and page.locator("img").count() == 1
    assert errors == [] and [u for u in requests if not u.startswith(("file:", "data:", "about:"))] == []
    page.context.close()
