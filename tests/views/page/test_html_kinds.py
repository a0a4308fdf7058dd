"""`qkv view --generate` and `qkv view --method` without a browser: the page's data, decoded here from the format's
description (qkv_cli/views/html_data.py's docstring, not its code), equal to the NPZ that `qkv generate` and
`qkv attribute` save for the same run. A tiny NumPy-made GPT-2 and BERT (tests/support/tiny.py): no PyTorch needed."""

from __future__ import annotations

import base64
import json
import re
from dataclasses import replace

import numpy as np
import pytest
from tiny import make_checkpoint
from typer.testing import CliRunner

from qkv_cli.cli import app
from qkv_cli.core.result import Kind
from qkv_cli.pipeline.compute import compute
from qkv_cli.pipeline.request import Request
from qkv_cli.views import kinds

PROMPT = "the cat sat"
TEXT = "the cat sat on the mat"
TOL = 2e-3  # 12-bit weights: at most 1/8190 off


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny")
    return {family: make_checkpoint(root / family, family) for family in ("bert", "gpt2")}


def run_both(tmp_path, view_args, command):
    """The page's data of `qkv view VIEW_ARGS` and the NPZ of `qkv COMMAND --save-npz`."""
    html, npz = tmp_path / "page.html", tmp_path / "run.npz"
    for args in (["view", *view_args, "--out", html], [*command, "--save-npz", npz]):
        result = CliRunner().invoke(app, [str(a) for a in args])
        assert result.exit_code == 0, (args, result.output)
    with np.load(npz, allow_pickle=False) as z:
        return data_of(html.read_text(encoding="utf-8")), {k: z[k] for k in z.files}


# --- the format, decoded independently ----------------------------------------------------------------------------


def data_of(html: str) -> dict:
    return json.loads(re.search(r'<script type="application/json" id="qkv-data">(.*?)</script>', html, re.S).group(1))


def raw(text: str) -> np.ndarray:
    return np.frombuffer(base64.b64decode(text), dtype=np.uint8)


def weights12(text: str, shape) -> np.ndarray:  # two 12-bit numbers in three bytes, alpha = q / 4095
    b = raw(text).reshape(-1, 3).astype(np.uint16)
    q = np.stack([(b[:, 0] << 4) | (b[:, 1] >> 4), ((b[:, 1] & 15) << 8) | b[:, 2]], axis=1).ravel()
    return (q[: int(np.prod(shape))] / 4095.0).reshape(shape)


def grid(text: str, m: int, n: int) -> np.ndarray:  # one bit per cell, least significant first, 1 = removed
    return np.unpackbits(raw(text), bitorder="little")[: m * n].reshape(m, n).astype(bool)


def layer_weights(entry: dict, shape, masked) -> np.ndarray:
    if "w" in entry:
        return weights12(entry["w"], shape)
    rel = np.frombuffer(base64.b64decode(entry["s"]), dtype="<f2").astype(np.float64).reshape(shape)
    e = np.where(masked[None], 0.0, np.exp(np.where(masked[None], 0.0, rel)))
    total = e.sum(-1, keepdims=True)
    return np.divide(e, total, out=np.zeros_like(e), where=total > 0)


# --- a generation -------------------------------------------------------------------------------------------------

SAMPLING = {"greedy": [], "sampled": ["--temperature", "1.5", "--top-k", "4", "--seed", "3"]}


@pytest.mark.parametrize("how", SAMPLING)
def test_generation_page_equals_the_npz(tiny, tmp_path, how):
    options = ["--model", tiny["gpt2"], "--dtype", "float32", *SAMPLING[how]]
    doc, z = run_both(tmp_path, [PROMPT, "--generate", 5, *options],
                      ["generate", PROMPT, "--max-new-tokens", 5, *options])  # fmt: skip
    A, P = z["step_attentions"], int(z["prompt_len"])  # (steps, L, tau, n_max)
    steps, L, tau, n = A.shape
    assert doc["kind"] == "generation" and (doc["L"], doc["tau"], doc["G"]) == (L, tau, tau) and doc["detail"] == []
    assert doc["start"] == L - 1  # the last layer first, as qkv heatmap --generate draws it
    [s] = doc["sentences"]
    assert s["tokens"] == list(z["tokens"][P:]) and s["keys"] == list(z["tokens"][:n]) and len(s["tokens"]) == steps
    expected_mask = np.arange(n)[None, :] >= P + np.arange(steps)[:, None]  # step t read keys 0 .. P + t - 1
    assert len(s["masks"]) == 1 and s["maskOf"] == [0] * L
    np.testing.assert_array_equal(grid(s["masks"][0], steps, n), expected_mask)
    for l, entry in enumerate(s["layers"]):
        assert "s" not in entry  # a generation keeps no scores
        w = weights12(entry["w"], (tau, steps, n))
        assert np.abs(w - A[:, l].transpose(1, 0, 2)).max() <= TOL
        assert not w[:, expected_mask].any()
    assert len(s["stats"]["rows"]) == L and len(s["stats"]["rows"][0]) == tau and s["stats"]["roles"] is None
    assert [c[0] for c in s["stats"]["columns"]] == ["entropy", "max_weight", "mean_distance", "first_share",
                                                     "prompt_share"]  # fmt: skip
    first = A[:, :, :, 0].mean(axis=0)  # (L, tau): the weight on the first token, mean over the written tokens
    np.testing.assert_allclose([[row[3] for row in layer] for layer in s["stats"]["rows"]], first, atol=1e-4)
    assert len(s["queryNotes"]) == steps and f"wrote position {P}" in s["queryNotes"][0]


def test_generation_page_options_and_hostile_text(tiny):
    gen = compute(Request.of(text=PROMPT, model=str(tiny["gpt2"]), generate=3))
    doc = kinds.page_data(gen, kv_heads=2, layer=0)
    assert doc["G"] == 2 and doc["kv"] == [0, 0, 1, 1] and doc["start"] == 0
    assert kinds.page_data(gen, layer=-1)["start"] == gen.step_attentions.shape[1] - 1
    html = kinds.render(replace(gen, text="\x1b[2J</script><script>alert(1)</script>"))
    assert "\x1b" not in html and html.count("</script") == 2 and "[2J" in data_of(html)["notes"][1]


# --- an attribution -----------------------------------------------------------------------------------------------

ATTRIBUTIONS = {
    "gpt2 rollout": ("gpt2", ["--method", "rollout"]),
    "gpt2 rollout max, layer 0": ("gpt2", ["--method", "rollout", "--head-fusion", "max", "--layer", "0"]),
    "gpt2 value-norm": ("gpt2", ["--method", "value-norm"]),
    "gpt2 value-zeroing": ("gpt2", ["--method", "value-zeroing"]),
    "bert rollout": ("bert", ["--method", "rollout"]),
    "bert value-zeroing": ("bert", ["--method", "value-zeroing", "--layer", "0"]),
    "random value-norm, cross": (
        None,
        ["--method", "value-norm", "--d", "16", "--heads", "4", "--kv-heads", "2", "--context", "le chat est assis"],
    ),
    "random value-norm, causal": (None, ["--method", "value-norm", "--d", "16", "--heads", "2", "--causal"]),
}


@pytest.mark.parametrize("case", ATTRIBUTIONS)
def test_attribution_page_equals_the_npz(tiny, tmp_path, case):
    family, options = ATTRIBUTIONS[case]
    options = options + (["--model", tiny[family]] if family else [])
    doc, z = run_both(tmp_path, [TEXT, *options], ["attribute", TEXT, *options])
    method = options[options.index("--method") + 1]
    tau, m, n = z["weights"].shape
    assert doc["kind"] == "attribution" and doc["L"] == 1 and doc["tau"] == tau
    assert doc["attribution"]["method"] == method == str(z["method"]) and doc["attribution"]["layer"] == int(z["layer"])
    assert doc["attribution"]["headFusion"] == (str(z["head_fusion"]) if "head_fusion" in z else None)
    [s] = doc["sentences"]
    assert s["tokens"] == list(z["tokens"]) and len(s["keys"]) == n
    if "context_tokens" in z:
        assert s["keys"] == list(z["context_tokens"])
    masked = grid(s["masks"][0], m, n)
    np.testing.assert_array_equal(masked, np.isneginf(z["mask"]))
    w = layer_weights(s["layers"][0], (tau, m, n), masked)
    assert np.abs(w - z["weights"]).max() <= TOL  # the layer's raw weights, as for any run
    a = np.frombuffer(base64.b64decode(s["attribution"]["f"]), dtype="<f4").reshape(m, n)
    np.testing.assert_allclose(a, z["attribution"], rtol=1e-6, atol=1e-7 * np.abs(z["attribution"]).max())
    removed = grid(s["attribution"]["mask"], m, n)  # masked by the layer and exactly 0
    np.testing.assert_array_equal(removed, np.isneginf(z["mask"]) & (z["attribution"] == 0))
    assert method in " ".join(doc["notes"])


@pytest.mark.parametrize(
    "args, message",
    [
        (["--method", "rollout"], "--method rollout needs --model"),
        (["--generate", "3"], "--generate needs --model"),
        (["--method", "value-norm", "--head-fusion", "max"], "--head-fusion is for --method rollout"),
        (["--method", "value-norm", "--batch"], "cannot be combined with --batch"),
        (["--model", "GPT", "--generate", "3", "--method", "rollout"], "cannot be combined with --generate"),
        (["--model", "GPT", "--generate", "3", "--layer", "7"], "layer 7 does not exist"),
        (["--model", "BERT", "--generate", "3"], "encoder"),
    ],
)
def test_view_refuses_bad_generation_and_attribution_options(tiny, tmp_path, monkeypatch, args, message):
    monkeypatch.chdir(tmp_path)
    args = [{"GPT": tiny["gpt2"], "BERT": tiny["bert"]}.get(a, a) for a in args]
    r = CliRunner().invoke(app, ["view", PROMPT, *map(str, args)])
    assert r.exit_code == 2 and message in r.output and r.output.count("\n") == 1, r.output
    assert list(tmp_path.iterdir()) == []


def test_every_kind_has_its_views():
    """One entry per kind (views.kinds), each with a page, an NPZ and a printed form."""
    assert set(kinds.KINDS) == set(Kind)
    assert all(v.page is not None and v.arrays is not None and v.emit is not None for v in kinds.KINDS.values())
