"""`qkv view` within a budget: the line it prints (size and contents, on stderr), --max-page-size, and the compact
storage of a large page (8-bit row shares, invisible weights as 0, deflated), decoded here independently."""

from __future__ import annotations

import base64
import json
import re
import zlib

import numpy as np
import pytest
from helpers import smollm2_gguf
from typer.testing import CliRunner

from qkv_cli.cli import app
from qkv_cli.views.page import data as html_data

runner = CliRunner()


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


def data_of(html: str) -> dict:
    found = re.search(r'<script type="application/json" id="qkv-data">(.*?)</script>', html, re.S)
    return json.loads(found.group(1))


def field(text: str) -> bytes:  # a binary field: base64, or "z:" + base64 of a zlib stream
    return zlib.decompress(base64.b64decode(text[2:])) if text.startswith("z:") else base64.b64decode(text)


def compact_weights(entry: dict, shape) -> np.ndarray:  # q / 255 * the row's largest
    q = np.frombuffer(field(entry["q8"]), dtype=np.uint8).astype(np.float64).reshape(shape)
    top = np.frombuffer(field(entry["rmax"]), dtype="<f4").astype(np.float64).reshape(shape[:2])
    return q / 255 * top[..., None]


def softmax_rows(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def test_8_bit_row_shares_within_1_percent_of_the_row_and_invisible_ones_zero():
    rng = np.random.default_rng(0)
    w = softmax_rows(rng.normal(scale=3.0, size=(3, 40, 50)))
    w[0, 0] = 0.0  # a row of zeros stays zeros
    shown = compact_weights(html_data.pack8(w), w.shape)
    top = w.max(-1, keepdims=True)
    assert (np.abs(shown - w) <= top / 510 + 1e-7)[w >= 3 / 255 * top].all()
    assert not shown[w < 2.5 / 255 * top].any()  # under 1% of its row's largest: stored as 0
    assert np.allclose(shown.max(-1), top[..., 0], rtol=1e-6) and not shown[0, 0].any()
    small = w < 0.01 * top
    assert small.mean() > 0.05 and np.all(np.abs(shown - w)[small] <= 0.01 * top.repeat(50, -1)[small])


def test_view_says_the_size_and_what_the_page_holds_on_stderr(tmp_path):
    out = tmp_path / "a.html"
    r = invoke("view", "the cat sat", "--d", "16", "--heads", "2", "--causal", "--out", out)
    assert r.exit_code == 0, r.output
    size = out.stat().st_size
    assert r.stdout == ""
    line = r.stderr.strip()
    assert "\n" not in line and line.startswith(f"wrote {out} (")
    assert f"{size / 1000:.1f} KB: 1 layer x 2 heads x 3 x 3, float16 scores;" in line


@pytest.mark.parametrize(
    ("limit", "message"),
    [
        ("1KB", "more than --max-page-size 1.0 KB: shrink it with a shorter text"),
        ("lots", "--max-page-size 'lots' is not a size"),
        ("0", "--max-page-size '0' is 0 B: give at least 1 byte"),
    ],
)
def test_a_page_above_the_limit_is_refused_before_writing(tmp_path, limit, message):
    out = tmp_path / "a.html"
    r = invoke("view", "the cat sat", "--d", "16", "--heads", "2", "--out", out, "--max-page-size", limit)
    assert r.exit_code == 2 and message in r.output and len(r.output.strip().splitlines()) == 1, r.output
    assert "Traceback" not in r.output and not out.exists()
    if limit == "1KB":
        shown = re.search(r"the page would be about ([0-9.]+) KB", r.output)
        assert shown and 1 < float(shown.group(1)) and "--max-page-size " in r.output.split("raise the limit")[1]


def test_the_limit_raised_writes_the_page(tmp_path):
    out = tmp_path / "a.html"
    r = invoke("view", "the cat sat", "--d", "16", "--heads", "2", "--out", out, "--max-page-size", "1MB")
    assert r.exit_code == 0 and out.exists()


def test_a_large_checkpoint_page_is_compact_and_shows_the_run(tmp_path, monkeypatch):
    """SmolLM2 on 60 tokens, the compact threshold lowered to it: 8-bit row shares for the layers without scores,
    the last layer's scores (masked cells stored as 0), everything deflated; far smaller than the 12-bit page."""
    gguf, text = smollm2_gguf(), " ".join(["the cat sat on the mat and looked at the dog"] * 5)
    npz, full, small = tmp_path / "run.npz", tmp_path / "full.html", tmp_path / "small.html"
    assert invoke("run", text, "--model", gguf, "--dtype", "float32", "--save-npz", npz).exit_code == 0
    assert invoke("view", text, "--model", gguf, "--dtype", "float32", "--out", full).exit_code == 0
    monkeypatch.setattr(html_data, "COMPACT_CELLS", 1000)
    r = invoke("view", text, "--model", gguf, "--dtype", "float32", "--out", small)
    assert r.exit_code == 0 and "8-bit weights and float16 scores" in r.stderr
    assert small.stat().st_size < full.stat().st_size / 3
    with np.load(npz) as z:
        A, scores = z["attentions"], z["scores"]
    doc = data_of(small.read_text())
    L, tau, m, _ = A.shape
    layers = doc["sentences"][0]["layers"]
    for l in range(L - 1):
        shown, top = compact_weights(layers[l], (tau, m, m)), A[l].max(-1, keepdims=True)
        assert np.all(np.abs(shown - A[l]) <= 0.0099 * top + 1e-6)
    last = layers[-1]
    assert "q8" not in last and last["maskedScores"] is False
    rel = np.frombuffer(field(last["s"]), dtype="<f2").astype(np.float64).reshape(tau, m, m)
    top = np.frombuffer(field(last["top"]), dtype="<f4").astype(np.float64).reshape(tau, m)
    allowed = np.tril(np.ones((m, m), dtype=bool))
    assert np.abs((rel + top[..., None])[:, allowed] - scores[:, allowed]).max() < 0.02
    assert not rel[:, ~allowed].any()
