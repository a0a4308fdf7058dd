"""`qkv patch` through the CLI on a tiny GPT-2: the table, JSON with every recovery, the NPZ, the heatmaps, and
bad input refused in one line (exit 2) before any forward."""

from __future__ import annotations

import json

import numpy as np
import pytest
from clitools import assert_one_line_error, invoke
from tiny import make_checkpoint

CLEAN, CORRUPTED = "the cat sat on the", "the dog sat on the"


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory):
    return make_checkpoint(tmp_path_factory.mktemp("gpt2") / "m", "gpt2")


def patch(folder, *args):
    return invoke(["patch", CLEAN, CORRUPTED, "--model", folder, "--answer", "mat", *args])


def test_the_table_names_both_runs_and_the_top_patches(gpt2):
    r = patch(gpt2, "--wrong", "cat", "--what", "resid", "--what", "heads", "--top", "4")
    assert r.exit_code == 0, r.output
    assert "logit(mat) - logit(cat)" in r.stdout and "they differ at 1 'cat' -> 'dog'" in r.stdout
    assert "Top 4 patches (highest recovery first)" in r.stdout
    assert "resid" in r.stdout and "1.000" in r.stdout  # x_L at the last position: the clean run


def test_json_holds_every_recovery_and_the_npz_the_grids(gpt2, tmp_path):
    npz = tmp_path / "p.npz"
    r = patch(gpt2, "--wrong", "cat", "--what", "mlp", "--what", "v", "--format", "json", "--save-npz", npz)
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["metric"] == "logit-diff" and doc["direction"] == "denoise"
    assert np.array(doc["recovery"]["mlp"]).shape == (2, 5) and np.array(doc["recovery"]["v"]).shape == (2, 4)
    assert doc["labels"]["mlp"][1] == "1 cat/dog" and doc["labels"]["v"] == ["KV0", "KV1", "KV2", "KV3"]
    rec = np.array(doc["recovery"]["mlp"])
    raw = np.array(doc["metric_values"]["mlp"])
    np.testing.assert_allclose(rec, (raw - doc["metric_corrupted"]) / (doc["metric_clean"] - doc["metric_corrupted"]))
    with np.load(npz) as z:
        np.testing.assert_array_equal(z["recovery_mlp"], rec)
        assert float(z["metric_clean"]) == doc["metric_clean"]


def test_out_draws_one_panel_per_what(gpt2, tmp_path):
    png = tmp_path / "p.png"
    r = patch(gpt2, "--what", "resid", "--what", "pattern", "--out", png)
    assert r.exit_code == 0, r.output
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("args, fragments", [
    (["--what", "everything"], ("--what",)),
    (["--metric", "logit-diff"], ("needs --wrong",)),
    (["--answer", "cat sat"], ("--answer 'cat sat' is 2 tokens",)),
    (["--out", "picture.bmp"], (".bmp",)),
])  # fmt: skip
def test_bad_options_are_one_line(gpt2, args, fragments):
    assert_one_line_error(patch(gpt2, *args), *fragments)


def test_prompts_of_two_lengths_are_one_line_naming_both(gpt2):
    r = invoke(["patch", CLEAN, "the dog sat on the mat", "--model", gpt2, "--answer", "mat"])
    assert_one_line_error(r, "5 tokens", "6")


def test_prompts_with_a_common_start_and_end_are_paired_and_the_pairs_named(gpt2):
    r = invoke(["patch", CLEAN, "the dog ran far and sat on the", "--model", gpt2, "--answer", "mat", "--format",
                "json"])  # fmt: skip
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["pairs"] == [[0, 0], [2, 5], [3, 6], [4, 7]] and doc["answer_position"] == {"clean": 4, "corrupted": 7}
    assert doc["labels"]["resid"] == ["0 the", "2/5 sat", "3/6 on", "4/7 the"]
    table = invoke(["patch", CLEAN, "the dog ran far and sat on the", "--model", gpt2, "--answer", "mat"]).stdout
    assert "clean 5 tokens, corrupted 8: paired 0 and 2..4 -> 5..7; left out clean 1 'cat', corrupted 1..4 'dog ran " \
           "far and'" in " ".join(table.split())  # fmt: skip


def test_position_names_where_the_answer_is_read(gpt2):
    r = patch(gpt2, "--position", "2", "--format", "json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["answer_position"] == {"clean": 2, "corrupted": 2}
    assert "at the answer position (2 'sat')" in " ".join(patch(gpt2, "--position", "2").stdout.split())
    assert_one_line_error(patch(gpt2, "--position", "9"), "--position 9 is outside", "5 tokens")


def test_an_encoder_without_a_masked_lm_head_is_one_line(tmp_path):
    bert = make_checkpoint(tmp_path / "bert", "bert")  # the encoder only, as a sentence-transformer stores it
    r = invoke(["patch", CLEAN, CORRUPTED, "--model", bert, "--answer", "mat", "--position", "2"])
    assert_one_line_error(r, "has no masked-LM head", "cls.predictions")


def test_a_budget_too_small_is_refused_with_figures(gpt2):
    assert_one_line_error(patch(gpt2, "--max-memory", "10KB"), "needs about", "--max-memory")


def test_page_holds_the_grids_and_both_runs_attention(gpt2, tmp_path):
    page = tmp_path / "p.html"
    r = patch(gpt2, "--what", "heads", "--what", "k", "--page", page)
    assert r.exit_code == 0, r.output
    text = page.read_text(encoding="utf-8")
    assert "Content-Security-Policy" in text and '"attention_clean"' in text and '"attention_corrupted"' in text
    assert '"groups":[[0],[1],[2],[3]]' in text  # GPT-2: one query head per key/value head


@pytest.mark.parametrize(
    ("limit", "message"),
    [
        ("1KB", "the patching page would be about"),
        ("lots", "--max-page-size 'lots' is not a size"),
    ],
)
def test_the_page_is_bounded_by_max_page_size(gpt2, tmp_path, limit, message):
    page = tmp_path / "p.html"
    r = patch(gpt2, "--what", "heads", "--page", page, "--max-page-size", limit)
    assert_one_line_error(r, message)
    assert not page.exists() and list(tmp_path.iterdir()) == []  # no page, no half-written temporary
    if limit == "1KB":
        assert "more than --max-page-size 1.0 KB: shrink it with shorter prompts or fewer --what" in r.stderr
        assert "recovery grids and both runs' attention" in r.stderr and "--max-page-size " in r.stderr


def test_the_api_page_is_bounded_too(gpt2, tmp_path):
    import qkv_cli as qkv

    p = qkv.patch(CLEAN, CORRUPTED, model=str(gpt2), answer="mat", what=["heads"])
    with pytest.raises(qkv.QkvError, match="patching page|page would be about .* more than max_page_size"):
        p.page().save(tmp_path / "p.html", max_page_size="1KB")
    assert list(tmp_path.iterdir()) == []


def test_the_python_api_is_the_commands_door(gpt2):
    import qkv_cli as qkv

    p = qkv.patch(CLEAN, CORRUPTED, model=str(gpt2), answer="mat", wrong="cat", what=["resid", "q"])
    assert p.recovery("resid").shape == (2, 5) and p.recovery("q").shape == (2, 4)
    assert p.answer_position == (4, 4) and p.pairs() == [(i, i) for i in range(5)]
    longer = qkv.patch(CLEAN, "the dog ran far and sat on the", model=str(gpt2), answer="mat", position=3)
    assert longer.answer_position == (3, 6) and longer.pairs() == [(0, 0), (2, 5), (3, 6), (4, 7)]
    assert p.top(1)[0]["recovery"] == max(p.recovery("resid").max(), p.recovery("q").max())
    assert "<html" in p.page().html and p.heatmap() is not None
    with pytest.raises(qkv.QkvError, match="'mlp' was not patched"):
        p.recovery("mlp")


def test_the_command_is_a_client_of_the_api(gpt2):
    """qkv patch --format json and qkv.patch give the same recoveries (one engine behind both doors)."""
    import qkv_cli as qkv

    doc = json.loads(patch(gpt2, "--wrong", "cat", "--what", "attn", "--format", "json").stdout)
    p = qkv.patch(CLEAN, CORRUPTED, model=str(gpt2), answer="mat", wrong="cat", what=["attn"])
    np.testing.assert_array_equal(np.array(doc["recovery"]["attn"]), p.recovery("attn"))
