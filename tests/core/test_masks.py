"""Masks you can see: `qkv mask` labels each removed cell by its rule; --mask-file reads custom masks."""

import json

import numpy as np
import pytest
from helpers import causal_allowed, chunk_allowed, window_allowed
from typer.testing import CliRunner

from qkv_cli.cli import app
from qkv_cli.core.masks import RULES, MaskSpec, additive, allowed_grid, removed_by, rule_grids
from qkv_cli.core.settings import Settings
from qkv_cli.errors import QkvError
from qkv_cli.pipeline.seeded import run
from qkv_cli.text.maskfile import load_mask_file

runner = CliRunner()


def invoke(*args):
    return runner.invoke(app, list(args), env={"COLUMNS": "100"})


def test_rule_grids_match_masks_built_by_hand():
    g = rule_grids(MaskSpec(causal=True), 6)
    np.testing.assert_array_equal(allowed_grid(g, 6, 6), causal_allowed(6))
    g = rule_grids(MaskSpec(window=3), 6)
    np.testing.assert_array_equal(allowed_grid(g, 6, 6), window_allowed(6, 3))
    assert not (g["causal"] & g["window"]).any()  # a window cell is removed by one rule only
    assert g["window"][5, 2] and g["causal"][2, 3] and not g["window"][5, 3]


def test_chunk_rule_keeps_the_query_s_own_chunk_and_names_why():
    """Chunked attention (Llama 4): the keys of earlier chunks are removed by the chunk rule, the future by the
    causal one (each cell by one rule only); a KV cache's new queries use absolute positions."""
    g = rule_grids(MaskSpec(chunk=3), 8)
    np.testing.assert_array_equal(allowed_grid(g, 8, 8), chunk_allowed(8, 3))
    assert set(g) == {"causal", "chunk"} and not (g["causal"] & g["chunk"]).any()
    assert removed_by(g, 8, 8)[5][2] == ["chunk"] and removed_by(g, 8, 8)[2][5] == ["causal"]
    assert removed_by(g, 8, 8)[5][3] == [] and g["chunk"].sum() == 3 * 3 + 2 * 6  # rows 3-5 lose 0-2; 6-7 lose 0-5
    step = rule_grids(MaskSpec(chunk=3), 2, 8, offset=6)  # queries 6, 7 after six cached tokens
    np.testing.assert_array_equal(allowed_grid(step, 2, 8), chunk_allowed(8, 3)[6:])
    assert MaskSpec(chunk=3).is_causal and MaskSpec(chunk=3).key != MaskSpec(causal=True).key


@pytest.mark.parametrize("bad", [0, -2, 2.5, True])
def test_chunk_size_must_be_a_whole_number_of_at_least_1(bad):
    with pytest.raises(QkvError, match="chunk size"):
        MaskSpec(chunk=bad)


def test_mask_command_chunk_names_each_removed_cell():
    r = invoke("mask", "a b c d e f g", "--chunk", "3")
    assert r.exit_code == 0, r.output
    rows = {line.split()[0]: line.split()[1:] for line in r.output.splitlines() if len(line.split()) == 8}
    assert rows["a"] == ["✓", "C", "C", "C", "C", "C", "C"]
    assert rows["e"] == ["K", "K", "K", "✓", "✓", "C", "C"] and rows["g"] == ["K"] * 6 + ["✓"]
    assert "K = chunk (n_ch=3): key in an earlier chunk" in r.output and "13 of 49 cells may attend" in r.output
    doc = json.loads(invoke("mask", "a b c d e f g", "--chunk", "3", "--format", "json").stdout)
    assert doc["chunk"] == 3 and doc["removed_by"][4][1] == ["chunk"] and doc["removed_by"][1][4] == ["causal"]
    np.testing.assert_array_equal(doc["allowed"], chunk_allowed(7, 3))


@pytest.mark.parametrize("kernel", ["vectorized", "loop", "reference"])
def test_run_with_chunks_weighs_only_the_query_s_chunk_in_every_kernel(kernel):
    text = " ".join("abcdefghijk")
    res = run(text, Settings(d=16, tau=2, chunk=4, kernel=kernel))
    assert (res.weights[:, ~chunk_allowed(11, 4)] == 0).all()
    np.testing.assert_allclose(res.weights.sum(axis=-1), 1.0)
    np.testing.assert_allclose(res.weights, run(text, Settings(d=16, tau=2, chunk=4)).weights, atol=1e-12)
    r = invoke("run", text, "--chunk", "4", "--d", "16", "--heads", "2", "--kernel", kernel, "--format", "json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["settings"]["chunk"] == 4 and doc["settings"]["causal"] is True
    np.testing.assert_allclose(doc["matrices"]["weights"], res.weights, atol=1e-12)


@pytest.mark.parametrize(
    "args,fragment",
    [
        (["mask", "a b", "--chunk", "0"], "'0' is not valid"),
        (["run", "a b", "--chunk", "-1"], "'-1' is not valid"),
        (["run", "a b", "--chunk", "2", "--context", "x y"], "--chunk 2 needs self-attention"),
        (["mask", "a b", "--chunk", "2", "--context", "x y"], "--chunk 2 needs self-attention"),
    ],
)
def test_bad_chunks_are_one_line_exit_2(args, fragment):
    r = invoke(*args)
    assert r.exit_code == 2 and fragment in r.stderr and r.stderr.count("\n") == 1, r.stderr


def test_padding_and_custom_and_several_rules_per_cell():
    custom = np.ones((4, 4), dtype=bool)
    custom[3, 1] = custom[0, 3] = False
    g = rule_grids(MaskSpec(causal=True, padding=np.array([0, 0, 0, 1], bool), custom=custom), 4)
    cells = removed_by(g, 4, 4)
    assert cells[0][3] == ["causal", "padding", "custom"]
    assert cells[3][1] == ["custom"] and cells[3][3] == ["padding"] and cells[2][0] == []
    assert allowed_grid(g, 4, 4).sum() == 10 - 1 - 1  # lower triangle, minus the pad key on row 3, minus (3, 1)


def test_additive_mask_is_zero_where_allowed_and_minus_inf_elsewhere():
    assert additive(MaskSpec(), 3) is None  # no rule: every query sees every key
    np.testing.assert_array_equal(additive(MaskSpec(causal=True), 2), [[0, -np.inf], [0, 0]])
    np.testing.assert_array_equal(np.isneginf(additive(MaskSpec(window=2), 5)), ~window_allowed(5, 2))
    assert additive(MaskSpec(causal=True), 3, dtype=np.float32).dtype == np.float32


def test_every_rule_has_a_distinct_letter_help_and_option():
    letters = [rule.letter for rule in RULES.values()]
    assert len(set(letters)) == len(letters) and all(r.help and r.option for r in RULES.values())


def test_mask_command_table_labels_each_rule():
    r = invoke("mask", "a b c d e", "--causal", "--window", "2")
    assert r.exit_code == 0, r.output
    rows = {
        line.split()[0]: line.split()[1:]
        for line in r.output.splitlines()
        if line[:2].strip() in "abcde" and len(line.split()) == 6
    }
    assert rows["a"] == ["✓", "C", "C", "C", "C"]
    assert rows["e"] == ["W", "W", "W", "✓", "✓"]
    assert "C = causal" in r.output and "W = window (n_c=2)" in r.output
    assert "9 of 25 cells may attend" in r.output


def test_mask_command_json_and_pad_to():
    r = invoke("mask", "x y z", "--pad-to", "5", "--causal", "--format", "json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["tokens"][-2:] == ["[PAD]", "[PAD]"] and doc["m"] == doc["n"] == 5
    assert doc["removed_by"][4][3] == ["padding"] and doc["removed_by"][0][4] == ["causal", "padding"]
    assert doc["mask"][1] == [0.0, 0.0, None, None, None]
    assert doc["counts"]["allowed"] == (1 + 2 + 3) + 2 * 3  # real rows (causal), then 2 pad rows see 3 real keys
    assert set(doc["rules"]) == {"causal", "padding"}


def test_mask_command_defaults_to_a_sample_and_no_rules():
    r = invoke("mask", "--format", "json")
    doc = json.loads(r.stdout)
    assert doc["m"] > 3 and doc["rules"] == {} and all(all(row) for row in doc["allowed"])


# ---- --mask-file ---------------------------------------------------------------------------------------------


def write_grid(tmp_path, text, name="m.txt"):
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return p


def test_text_and_npy_masks_read_the_same(tmp_path):
    grid = np.array([[1, 0, 1], [1, 1, 0], [0, 1, 1]], dtype=bool)
    t = write_grid(tmp_path, "# comment\n1 0 1\n1,1,0\n011\n")
    n = tmp_path / "m.npy"
    np.save(n, grid)
    np.save(tmp_path / "i.npy", grid.astype(np.int8))
    for path in (t, n, tmp_path / "i.npy"):
        np.testing.assert_array_equal(load_mask_file(path), grid)


def test_custom_mask_in_the_pipeline(tmp_path):
    grid = np.array([[1, 0, 1], [1, 1, 0], [0, 0, 0]], dtype=bool)
    res = run("a b c", Settings(d=8, tau=2), allowed=grid)
    assert (res.weights[:, ~grid] == 0).all()
    np.testing.assert_allclose(res.weights[:, :2].sum(-1), 1.0)
    assert (res.weights[:, 2] == 0).all() and res.empty_rows.tolist() == [False, False, True]
    both = run("a b c", Settings(d=8, tau=2, causal=True), allowed=grid)  # rules combine: causal AND custom
    assert both.masked.tolist() == [[False, True, True], [False, False, True], [True, True, True]]


def test_mask_file_through_run_and_mask(tmp_path):
    p = write_grid(tmp_path, "110\n011\n001\n")
    r = invoke("run", "a b c", "--d", "8", "--tau", "2", "--mask-file", str(p), "--format", "json", "--show", "mask")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["matrices"]["mask"] == [[0.0, 0.0, None], [None, 0.0, 0.0], [None, None, 0.0]]
    r = invoke("mask", "a b c", "--mask-file", str(p), "--causal")
    assert "X = custom" in r.output and "C = causal" in r.output


@pytest.mark.parametrize(
    "content,name,message",
    [
        ("1 0\n1\n", "m.txt", "has rows of different lengths (1, 2)"),
        ("1 2\n", "m.txt", "line 1 has '2': a text mask holds only 0 and 1"),
        ("# nothing\n", "m.txt", "is empty"),
        (None, "missing.txt", "does not exist"),
        (b"\x93NUMPY garbage", "bad.npy", "is not a valid .npy file"),
        ("obj", "obj.npy", "holds Python objects (pickled)"),
        ("float", "f.npy", "values other than 0 and 1"),
        ("3d", "c.npy", "must be a 2-D grid"),
        (b"\xff\xfe\x00", "m.txt", "neither a .npy file nor UTF-8 text"),
    ],
)
def test_bad_mask_files(tmp_path, content, name, message):
    p = tmp_path / name
    if content == "obj":
        np.save(p, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    elif content == "float":
        np.save(p, np.full((2, 2), 0.5))
    elif content == "3d":
        np.save(p, np.ones((2, 2, 2), bool))
    elif isinstance(content, bytes):
        p.write_bytes(content)
    elif content is not None:
        p.write_text(content)
    with pytest.raises(QkvError, match="--mask-file") as err:
        load_mask_file(p)
    assert message in str(err.value)
    r = invoke("run", "a b", "--mask-file", str(p))
    assert r.exit_code == 2 and message in r.output and "Traceback" not in r.output


def test_shape_mismatch_names_both_shapes(tmp_path):
    p = write_grid(tmp_path, "11\n11\n")
    r = invoke("run", "a b c", "--mask-file", str(p))
    assert r.exit_code == 2
    assert "--mask-file has shape 2 x 2 but this run needs m=3 x m=3 (the text has 3 tokens)" in r.output
    r = invoke("run", "a b c", "--context", "x y z w", "--mask-file", str(p))
    assert "needs m=3 queries x n=4 keys" in r.output
    r = invoke("mask", "a b c", "--mask-file", str(p))
    assert r.exit_code == 2 and "has shape 2 x 2" in r.output


def test_mask_file_is_a_directory(tmp_path):
    r = invoke("run", "a b", "--mask-file", str(tmp_path))
    assert r.exit_code == 2 and "is a directory" in r.output


def test_mask_grid_at_80_columns_says_what_is_left_out():
    """Regression: the grid's fit ignored the column gaps; at 80 columns rich dropped the last key silently."""
    r = runner.invoke(app, ["mask", "--causal"], env={"COLUMNS": "80"})
    assert r.exit_code == 0, r.output
    assert "showing 11 of 11 rows and 10 of 11 columns" in r.output
    assert max(len(line) for line in r.output.splitlines()) <= 80


# ---- --model: the checkpoint's own tokens and mask --------------------------------------------------------------


def test_mask_model_shows_bert_special_tokens_and_removes_nothing(minilm):
    r = invoke("mask", "The cat sat.", "--model", str(minilm))
    assert r.exit_code == 0, r.output
    assert "(bert), its own tokens: bidirectional, nothing removed" in r.output
    assert "[CLS]" in r.output and "[SEP]" in r.output and "36 of 36 cells may attend" in r.output
    doc = json.loads(invoke("mask", "The cat sat.", "--model", str(minilm), "--format", "json").stdout)
    assert doc["tokens"] == ["[CLS]", "the", "cat", "sat", ".", "[SEP]"] == doc["key_tokens"]
    assert doc["rules"] == {} and doc["counts"] == {"allowed": 36} and doc["model"]["family"] == "bert"
    assert len(json.loads(invoke("mask", "--model", str(minilm), "--format", "json").stdout)["tokens"]) > 3


@pytest.mark.parametrize(
    "args,flag",
    [
        (["--causal"], "--causal"),
        (["--window", "2"], "--window"),
        (["--chunk", "2"], "--chunk"),
        (["--tokenizer", "bpe"], "--tokenizer"),
        (["--context", "x y"], "--context"),
        (["--mask-file", "m.txt"], "--mask-file"),
        (["--pad-to", "9"], "--pad-to"),
    ],
)
def test_mask_model_refuses_options_the_checkpoint_fixes(minilm, args, flag):
    r = invoke("mask", "a b", "--model", str(minilm), *args)
    assert r.exit_code == 2 and f"{flag} cannot be used with --model" in r.stderr and r.stderr.count("\n") == 1


def test_mask_download_needs_model():
    r = invoke("mask", "a b", "--download")
    assert r.exit_code == 2 and "--download needs --model" in r.stderr


@pytest.mark.reference
def test_mask_model_gpt2_is_causal_like_its_forward(gpt2_dir):
    doc = json.loads(invoke("mask", "the cat sat on it", "--model", str(gpt2_dir), "--format", "json").stdout)
    m = doc["m"]
    assert doc["model"]["family"] == "gpt2" and set(doc["rules"]) == {"causal"}
    np.testing.assert_array_equal(doc["allowed"], np.tril(np.ones((m, m), dtype=bool)))
    ran = json.loads(invoke("run", "the cat sat on it", "--model", str(gpt2_dir), "--format", "json").stdout)
    assert ran["labels"] == doc["tokens"]
    np.testing.assert_array_equal(np.array(ran["attentions"])[0, 0] > 0, doc["allowed"])  # what the forward used
