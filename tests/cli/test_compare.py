"""qkv compare: the difference B - A checked against two separate runs through the public API (qkv.run on each
text, or on each model, subtracted here), the alignment when token counts differ, the outputs, the refusals."""

from __future__ import annotations

import json

import numpy as np
import pytest
from clitools import assert_one_line_error, invoke
from helpers import smollm2_gguf
from tiny import make_checkpoint

import qkv_cli as qkv

SMALL = ["--d", "32", "--heads", "4"]
CAT, DOG = "The cat sat on the mat.", "The dog sat on the mat."
BIG_DOG = "The big dog sat on the mat."


@pytest.fixture(scope="module")
def tiny_pair(tmp_path_factory):
    """Two tiny llama checkpoints of one shape and one tokenizer, with different weights (a base and a tuned one)."""
    folder = tmp_path_factory.mktemp("compare")
    return make_checkpoint(folder / "base", "llama", seed=0), make_checkpoint(folder / "tuned", "llama", seed=1)


def compared(*args) -> dict:
    r = invoke(["compare", *args, "--format", "json"])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def weights(run) -> np.ndarray:  # (L, tau, m, m) of a checkpoint run, (1, tau, m, m) of one random layer
    return run.attentions if hasattr(run, "attentions") else run.weights[None]


def expected(wa, wb, ia, ib):
    """B - A at the aligned positions and each head's TV, written from the definition (not from qkv's code)."""
    ia, ib = np.asarray(ia), np.asarray(ib)
    A = wa[:, :, ia][:, :, :, ia]
    B = wb[:, :, ib][:, :, :, ib]
    diff = B - A
    rows_a, rows_b = wa[:, :, ia].sum(-1), wb[:, :, ib].sum(-1)  # every key, aligned or not
    tv = 0.5 * (np.abs(diff).sum(-1) + (rows_a - A.sum(-1)) + (rows_b - B.sum(-1)))
    return diff, tv.mean(-1)


def check_against_runs(doc, wa, wb, ia, ib):
    assert doc["alignment"]["a"] == list(ia) and doc["alignment"]["b"] == list(ib)
    diff, tv = expected(wa, wb, ia, ib)
    np.testing.assert_allclose(np.array(doc["weights_a"]), wa, atol=1e-12)
    np.testing.assert_allclose(np.array(doc["weights_b"]), wb, atol=1e-12)
    np.testing.assert_allclose(np.array(doc["diff"]), diff, atol=1e-12)
    np.testing.assert_allclose(np.array(doc["tv"]), tv, atol=1e-12)
    assert np.abs(diff).max() > 1e-3  # the texts (or models) differ: a test that could fail
    top = doc["heads_moved"][0]
    assert top["tv"] == pytest.approx(tv.max())
    assert [top["layer"], top["head"]] == [
        doc["layers"][int(np.argmax(tv) // tv.shape[1])],
        int(np.argmax(tv) % tv.shape[1]),
    ]


def test_two_texts_on_random_weights_equal_two_runs_subtracted():
    doc = compared(CAT, DOG, *SMALL, "--causal")
    wa = weights(qkv.run(CAT, d=32, heads=4, causal=True))
    wb = weights(qkv.run(DOG, d=32, heads=4, causal=True))
    check_against_runs(doc, wa, wb, range(7), range(7))
    al = doc["alignment"]
    assert al["by_position"] and al["differing"] == [1]  # cat -> dog
    assert "tokens differ at 1 'cat' -> 'dog'" in al["description"]


def test_different_token_counts_align_the_common_start_and_end():
    doc = compared(CAT, BIG_DOG, *SMALL)
    wa, wb = weights(qkv.run(CAT, d=32, heads=4)), weights(qkv.run(BIG_DOG, d=32, heads=4))
    # The | cat | sat on the mat .  vs  The | big dog | sat on the mat .
    check_against_runs(doc, wa, wb, [0, 2, 3, 4, 5, 6], [0, 3, 4, 5, 6, 7])
    al = doc["alignment"]
    assert (al["prefix"], al["suffix"], al["by_position"]) == (1, 5, False)
    assert "left out A 1 'cat', B 1..2 'big dog'" in al["description"]


@pytest.mark.parametrize(
    "a,b,ia,ib",
    [
        ("the cat sat", "the cat sat down now", [0, 1, 2], [0, 1, 2]),  # B adds an end: the common start
        ("cat sat", "so the cat sat", [0, 1], [2, 3]),  # B adds a start: the common end
        ("the cat sat", "the cat sat", [0, 1, 2], [0, 1, 2]),  # the same text: nothing moves
    ],
)
def test_alignment_cases(a, b, ia, ib):
    doc = compared(a, b, *SMALL)
    wa, wb = weights(qkv.run(a, d=32, heads=4)), weights(qkv.run(b, d=32, heads=4))
    assert doc["alignment"]["a"] == ia and doc["alignment"]["b"] == ib
    diff, tv = expected(wa, wb, ia, ib)
    np.testing.assert_allclose(np.array(doc["diff"]), diff, atol=1e-12)
    np.testing.assert_allclose(np.array(doc["tv"]), tv, atol=1e-12)
    if a == b:
        assert np.abs(np.array(doc["diff"])).max() == 0 and np.array(doc["tv"]).max() == 0


def test_two_texts_on_minilm_equal_two_runs_subtracted(minilm):
    doc = compared(CAT, BIG_DOG, "--model", minilm)
    ra, rb = qkv.run(CAT, model=str(minilm)), qkv.run(BIG_DOG, model=str(minilm))
    # [CLS] the | cat | sat on the mat . [SEP]  vs  [CLS] the | big dog | sat on the mat . [SEP]
    check_against_runs(doc, weights(ra), weights(rb), [0, 1, *range(3, 9)], [0, 1, *range(4, 10)])
    assert doc["a"]["ids"] == [int(i) for i in ra.ids] and doc["b"]["ids"] == [int(i) for i in rb.ids]
    assert len(doc["heads_moved"]) == 6 * 12 and doc["layers"] == list(range(6))


def test_two_texts_on_smollm2_one_layer_table_and_json():
    gguf = smollm2_gguf()
    r = invoke(["compare", CAT, DOG, "--model", gguf, "--layer", "3", "--head", "4", "--dtype", "float32"])
    assert r.exit_code == 0, r.output
    assert "aligned by position: all 7 tokens; tokens differ at 1 'cat' -> 'dog'" in r.stdout
    assert "alpha of layer 3, head 4:" in r.stdout and "Heads that moved most (10 of 270)" in r.stdout
    doc = compared(CAT, DOG, "--model", gguf, "--dtype", "float32")
    model = qkv.load(str(gguf), dtype="float32")
    check_against_runs(doc, weights(qkv.run(CAT, model=model)), weights(qkv.run(DOG, model=model)), range(7), range(7))


def test_one_text_on_two_models_equals_two_runs_subtracted(tiny_pair):
    base, tuned = tiny_pair
    doc = compared("the cat sat on the mat", "--model", base, "--model", tuned)
    ra, rb = qkv.run("the cat sat on the mat", model=str(base)), qkv.run("the cat sat on the mat", model=str(tuned))
    m = len(ra.ids)
    check_against_runs(doc, weights(ra), weights(rb), range(m), range(m))
    assert doc["mode"] == "models" and doc["a"]["name"] == "base" and doc["b"]["name"] == "tuned"
    assert doc["alignment"]["differing"] == []


def test_table_side_by_side_then_the_difference_and_the_heads_that_moved(tiny_pair):
    base, _ = tiny_pair
    r = invoke(["compare", "the cat sat", "the dog sat", "--model", base, "--top", "3"])
    assert r.exit_code == 0, r.output
    out = r.stdout
    pieces = ("A: 'the cat sat' (3 tokens)", "B: 'the dog sat' (3 tokens)", "aligned by position",
              "B - A (aligned positions)", "Heads that moved most (3 of 8)", "TV: the total-variation")  # fmt: skip
    for piece in pieces:
        assert piece in out, piece
    side = next(line for line in out.splitlines() if line.lstrip().startswith("the ") and "1.00" in line)
    assert side.count("the") == 2  # A's row and B's row on one line: side by side
    assert "cat/dog" in out  # the aligned label where the tokens differ


def test_npz_and_figure(tmp_path, in_tmp):
    npz, png = tmp_path / "c.npz", tmp_path / "c.svg"
    r = invoke(["compare", CAT, BIG_DOG, *SMALL, "--save-npz", npz, "--out", png, "--head", "2"])
    assert r.exit_code == 0, r.output
    doc = compared(CAT, BIG_DOG, *SMALL)
    with np.load(npz) as z:
        np.testing.assert_array_equal(z["diff"], np.array(doc["diff"]))
        np.testing.assert_array_equal(z["aligned_b"], doc["alignment"]["b"])
        assert list(z["labels_b"]) == doc["b"]["labels"] and str(z["mode"]) == "texts"
    svg = png.read_text()
    assert "B - A" in svg and "head 2" in svg
    assert f"saved {png}" in r.stderr


@pytest.mark.parametrize(
    "args,fragments",
    [
        (["the cat sat"], ["two texts", "two models"]),
        (["a", "b", "c"], ["two texts"]),
        (["the cat sat", "a dog ran off"], ["share neither their first nor their last token"]),
        ([CAT, DOG, "--layer", "0"], ["--layer needs --model"]),
        ([CAT, DOG, "--head", "9", *SMALL], ["head 9 does not exist", "0..3"]),
        ([CAT, DOG, "--out", "c.txt"], [".png, .svg, .pdf"]),
        ([CAT, DOG, "--top", "0"], ["--top"]),
        ([CAT, DOG, "--page", "c.png"], [".html"]),
    ],
)
def test_refusals_are_one_line(args, fragments, in_tmp):
    assert_one_line_error(invoke(["compare", *args]), *fragments)
    assert not list(in_tmp.iterdir())


def test_a_head_out_of_range_is_refused_before_either_text_runs(tiny_pair, monkeypatch):
    from qkv_cli.pipeline import compare

    def never(*args, **kwargs):
        raise AssertionError("a text ran")

    monkeypatch.setattr(compare, "run", never)
    assert_one_line_error(invoke(["compare", CAT, DOG, "--head", "4", *SMALL]), "--head 4 does not exist", "0..3")
    base, _ = tiny_pair
    assert_one_line_error(invoke(["compare", "the cat", "the dog", "--model", base, "--head", "4"]), "0..3")


def test_model_refusals_are_one_line(tiny_pair, tmp_path):
    base, tuned = tiny_pair
    bert = make_checkpoint(tmp_path / "bert", "bert")
    small = make_checkpoint(tmp_path / "small", "llama", config_overrides={"num_hidden_layers": 1})
    cases = [
        (["the cat", "--model", base, "--model", bert], ["tokenize the text differently", "one tokenizer"]),
        (["the cat", "--model", base, "--model", small], ["2 layers x 4 heads", "1 x 4", "the same layers"]),
        (["the cat", "the dog", "--model", base, "--model", tuned], ["two texts", "two models"]),
        (["the cat", "--model", base, "--model", tuned, "--model", bert], ["two models"]),
        (["the cat", "the dog", "--model", base, "--d", "8"], ["--d cannot be used with --model"]),
        (["the cat", "the dog", "--model", base, "--layer", "5"], ["layer 5 does not exist"]),
        (["the cat", "the dog", "--model", base, "--max-memory", "1KB"], ["more than --max-memory 1.0 KB"]),
        # the second model is loaded within what the first leaves, and says so
        (
            ["the cat", "--model", base, "--model", tuned, "--max-memory", "60KB"],
            ["tuned", "what is left of --max-memory 60.0 KB beside the"],
        ),
    ]
    for args, fragments in cases:
        assert_one_line_error(invoke(["compare", *args]), *fragments)


def test_batch_with_a_model_points_to_compare(tiny_pair):
    line = assert_one_line_error(invoke(["run", "the cat\nthe dog", "--batch", "--model", tiny_pair[0]]))
    assert "qkv compare A B --model M" in line and "d, the heads" not in line


@pytest.mark.reference
def test_an_encoder_decoder_is_refused_in_one_line(transformers, torch, tmp_path):
    from encdecs import build

    folder = tmp_path / "t5"
    build(transformers, torch, "t5", folder)
    line = assert_one_line_error(invoke(["compare", "the cat", "the dog", "--model", folder]))
    assert "not an encoder-decoder's" in line


def test_through_the_entry_point_in_a_subprocess():
    import subprocess
    import sys

    args = [sys.executable, "-m", "qkv_cli", "compare", "the cat sat", "the dog sat", *SMALL, "--format", "json"]
    done = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert json.loads(done.stdout)["alignment"]["differing"] == [1]


def test_the_page_holds_both_runs_pages_and_the_figure(tmp_path):
    """--page: one offline file with the header, the B - A figure as an inline PNG, the moved heads and A's and B's
    own pages (each the page qkv view writes of that run, in an iframe's srcdoc); the API's page() is the same."""
    import base64
    import html
    import re

    page = tmp_path / "c.html"
    r = invoke(["compare", CAT, BIG_DOG, *SMALL, "--page", str(page)])
    assert r.exit_code == 0, r.output
    assert f"wrote {page}" in r.stderr and "A and B side by side" in r.stderr
    text = page.read_text(encoding="utf-8")
    frames = re.findall(r'srcdoc="([^"]*)"', text)
    assert len(frames) == 2 and all("window.qkvView" in html.unescape(f) for f in frames)
    png = re.search(r'src="data:image/png;base64,([^"]+)"', text).group(1)
    assert base64.b64decode(png)[:8] == b"\x89PNG\r\n\x1a\n"
    assert "left out" in text and "http" not in text.replace("http-equiv", "")  # the alignment; nothing fetched
    api = qkv.compare(CAT, BIG_DOG, d=32, heads=4).page()
    assert api.html == text and 'srcdoc="' in api._repr_html_()
