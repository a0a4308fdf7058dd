"""--max-output on every kind of run that prints numbers (a batch, a long text's band, qkv mask, qkv generate, an
encoder-decoder's --target/--attention): refused in one line that names the size, what makes it and the ways to
shrink it, before the run; each estimate within 2x of the bytes the run then prints. The page's refusal has the
same shape; a page or a whole-document JSON to a full disk is one line and no file; the budget counts what the
output will hold."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from clitools import SMALL, assert_one_line_error, invoke
from tiny import make_checkpoint

from qkv_cli.core.budget import parse_size

TEXT = "the cat sat on the mat"
LONG = " ".join(["the cat sat on the mat and looked at the dog"] * 100)  # 1,100 words: the band, not m x m
LINES = "the cat sat\nthe dog ran far away\na cat"


def estimate_of(line: str) -> int:
    """The bytes a refusal says the output would be ("would be about 12.3 KB")."""
    return parse_size(re.search(r"would be about ([\d.]+) ?([KMG]?B)", line).expand(r"\1\2"))


def assert_refused_then_estimated(args, *fragments):
    """Refused under --max-output 1B in one line holding the fragments, nothing printed; the size it names is
    within 2x of what the same run prints under the default limit."""
    refused = invoke([*args, "--max-output", "1B"])
    line = assert_one_line_error(refused, "would be about", "more than --max-output 1 B", "shrink it with",
                                 "or raise the limit, e.g. --max-output", *fragments)  # fmt: skip
    assert refused.stdout == ""
    printed = invoke(args)
    assert printed.exit_code == 0, printed.output
    size = len(printed.stdout.encode("utf-8"))
    assert size / 2 <= estimate_of(line) <= 2 * size, (estimate_of(line), size, line)
    return line


RANDOM = [  # (options, fragments of the refusal)
    (["--batch", "--format", "json"], ["3 sentences of up to 5 tokens x 2 heads", "--head, fewer lines"]),
    (["--batch", "--format", "csv", "--head", "1"], ["x 1 head of --show weights", "fewer lines, shorter lines"]),
    (["--window", "2", "--format", "json"], ["1 layer x 2 heads x"]),  # a short text: the seeded run's layer
]  # fmt: skip


@pytest.mark.parametrize("options,fragments", RANDOM, ids=[" ".join(o) for o, _ in RANDOM])
def test_a_batch_and_a_short_window_run_are_bounded(options, fragments):
    line = assert_refused_then_estimated(["run", LINES if "--batch" in options else TEXT, *SMALL, *options],
                                         *fragments)  # fmt: skip
    if "--head" in options:  # an option already given is not offered again
        assert "--head" not in line.split("shrink it with")[1]


@pytest.mark.parametrize("fmt", ["json", "csv"])
def test_a_long_texts_band_is_bounded(fmt):
    """--window on a long text keeps only the band (tau, m, n_c): CSV lists every band weight, JSON summaries."""
    assert_refused_then_estimated(["run", LONG, *SMALL, "--window", "4", "--format", fmt],
                                  "2 heads x 1,100 rows x 4 keys of the band", "a smaller --window")  # fmt: skip


def test_qkv_mask_json_is_bounded():
    line = assert_refused_then_estimated(["mask", TEXT, "--causal", "--window", "3", "--format", "json"],
                                         "1 grid of 6 queries x 6 keys", "a shorter text")  # fmt: skip
    assert "--layer" not in line  # one grid: nothing to leave out
    assert invoke(["mask", TEXT, "--max-output", "1B"]).exit_code == 0  # the table is not bounded by it


@pytest.fixture(scope="module")
def damaged(tmp_path_factory):
    """A tiny Llama (tied embeddings: it can write) whose layer 0 W^q holds NaN: a run that reads it fails."""

    def edit(t):
        t["layers.0.self_attn.q_proj.weight"][0, :2] = np.nan

    folder = tmp_path_factory.mktemp("damaged") / "llama"
    return make_checkpoint(folder, "llama", config_overrides={"tie_word_embeddings": True}, tensor_edit=edit)


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    return make_checkpoint(tmp_path_factory.mktemp("llama") / "llama", "llama",
                           config_overrides={"tie_word_embeddings": True})  # fmt: skip


@pytest.mark.parametrize("fmt", ["json", "csv"])
def test_a_generation_is_refused_before_the_model_writes(damaged, llama, fmt):
    args = ["generate", TEXT, "--format", fmt, "--max-new-tokens", "6"]
    assert_one_line_error(invoke([*args, "--model", damaged]), "non-finite")  # the control: writing reads layer 0
    line = assert_one_line_error(invoke([*args, "--model", damaged, "--max-output", "1B"]),
                                 "6 tokens x 1 layer", "--max-new-tokens, fewer --layer")  # fmt: skip
    assert "non-finite" not in line
    assert_refused_then_estimated([*args, "--model", llama, "--layer", "0", "--layer", "1"], "6 tokens x 2 layers")


def test_the_budget_counts_what_the_output_holds(llama):
    """A JSON of a checkpoint holds every layer's weights (`attentions`): a budget that holds one layer's lets the
    table through and refuses the JSON, with the figure of each way down, and --layer -1's figure is honest."""
    base = ["run", TEXT, "--model", llama]
    line = assert_one_line_error(invoke([*base, "--format", "json", "--max-memory", "40KB"]), "every layer's attention")
    needed = parse_size(re.search(r"needs about ([\d.]+ [KMG]?B)", line).group(1).replace(" ", ""))
    one = parse_size(
        re.search(r"--layer -1 \(one layer's attention: ([\d.]+ [KMG]?B)\)", line).group(1).replace(" ", "")
    )
    limit = f"{(needed + one) // 2}B"  # above one layer's, below every layer's
    assert invoke([*base, "--max-memory", limit]).exit_code == 0  # the table of the last layer keeps it alone
    refused = invoke([*base, "--format", "json", "--max-memory", limit])  # the output fits --max-output (256 MB)
    assert_one_line_error(refused, f"needs about {line.split('needs about ')[1].split(',')[0]}", "--layer -1 (")
    assert refused.stdout == ""
    kept = invoke([*base, "--format", "json", "--max-memory", limit, "--layer", "-1"])  # the way down it offered
    assert kept.exit_code == 0 and json.loads(kept.stdout)["layers"].keys() == {"1"}, kept.output


def test_a_streamed_json_equals_the_npz_of_the_same_run(llama, tmp_path):
    """One qkv run: its JSON (written layer by layer) and its --save-npz hold the same numbers."""
    npz = tmp_path / "run.npz"
    result = invoke(["run", TEXT, "--model", llama, "--format", "json", "--show", "q,k,v,weights", "--save-npz", npz])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    with np.load(npz, allow_pickle=False) as z:
        assert doc["attention_layers"] == z["attention_layers"].tolist() == [0, 1]
        np.testing.assert_allclose(doc["attentions"], z["attentions"], rtol=0, atol=0)
        first = str(int(z["attention_layers"][0]))  # the NPZ details the first chosen layer
        for name in ("Q", "K", "V", "weights"):
            np.testing.assert_allclose(doc["layers"][first][name], z[name], rtol=0, atol=0, err_msg=name)
        np.testing.assert_allclose(doc["layers"]["1"]["weights"], z["attentions"][1], rtol=0, atol=0)


def test_a_page_above_its_limit_has_the_outputs_shape(tmp_path):
    """--max-page-size and --max-output refuse in one shape: size, what makes it, limit, ways down, a limit."""
    out = tmp_path / "a.html"
    line = assert_one_line_error(invoke(["view", TEXT, *SMALL, "--out", out, "--max-page-size", "1KB"]),
                                 "the page would be about", "(1 layer x 2 heads x 6 x 6", "more than --max-page-size "
                                 "1.0 KB: shrink it with a shorter text, or raise the limit, e.g. "
                                 "--max-page-size")  # fmt: skip
    raised = re.search(r"e\.g\. --max-page-size (\S+)$", line).group(1)
    assert not out.exists()
    assert invoke(["view", TEXT, *SMALL, "--out", out, "--max-page-size", raised]).exit_code == 0 and out.exists()


def test_a_comparison_page_takes_max_page_size(tmp_path):
    page = tmp_path / "c.html"
    args = ["compare", TEXT, "the dog sat on the mat", *SMALL, "--page", page]
    assert_one_line_error(invoke([*args, "--max-page-size", "1KB"]), "the comparison's page would be about",
                          "more than --max-page-size 1.0 KB", "shorter texts")  # fmt: skip
    assert not page.exists()
    assert invoke(args).exit_code == 0 and page.exists()


@pytest.fixture(scope="module")
def t5(tmp_path_factory):
    """A tiny random T5 saved by transformers (2 encoder layers, 3 decoder layers, 4 heads)."""
    from encdecs import build
    from helpers import reference_import

    folder = tmp_path_factory.mktemp("t5")
    build(reference_import("transformers"), reference_import("torch"), "t5", folder)
    return folder


ENCDEC = [  # (options, fragments): TEXT is 7 tokens with its </s>, the target 6 with the start and </s>
    (["run", "--target", "le chat est assis", "--format", "json"], ["3 layers x 4 heads x 6 rows x 7 keys",
                                                                   "a shorter source or target"]),
    (["run", "--attention", "encoder", "--format", "csv", "--layer", "0"], ["1 layer x 4 heads x 7 rows x 7 keys"]),
    (["generate", "--format", "json", "--max-new-tokens", "6"], ["6 tokens x 3 layers x 4 heads x 7 source tokens"]),
    (["generate", "--format", "csv", "--max-new-tokens", "6"], ["--max-new-tokens, a shorter source"]),
    (["attribute", "--target", "le chat est assis", "--format", "json"], ["x 6 rows x 7 keys of the attribution"]),
    (["attribute", "--attention", "encoder", "--format", "csv"], ["x 7 rows x 7 keys of the attribution"]),
]  # fmt: skip


@pytest.mark.reference
@pytest.mark.parametrize("options,fragments", ENCDEC, ids=[" ".join(o) for o, _ in ENCDEC])
def test_an_encoder_decoders_output_is_bounded(t5, options, fragments):
    """JSON holds all three attentions of every layer (transformers' names): counted before the pass."""
    line = assert_refused_then_estimated([options[0], TEXT, "--model", t5, *options[1:]], *fragments)
    if "--layer" in options:
        assert "--layer" not in line.split("shrink it with")[1]


def test_qkv_explain_json_is_bounded_before_the_run(damaged):
    assert_refused_then_estimated(["explain", TEXT, "--format", "json", *SMALL], "1 head x 6 rows x 6 keys, d=8")
    assert_refused_then_estimated(["explain", TEXT, "--format", "json", *SMALL, "--context", "a dog ran"],
                                  "1 head x 6 rows x 3 keys")  # fmt: skip
    args = ["explain", TEXT, "--format", "json", "--model", damaged]
    assert_one_line_error(invoke(args), "non-finite")  # the control: the walk reads layer 0 on its way
    line = assert_one_line_error(invoke([*args, "--max-output", "1B"]), "1 head x 6 rows x 6 keys, d=16")
    assert "non-finite" not in line


def test_a_scans_page_takes_max_page_size(llama, tmp_path):
    from scanning import SENTENCES, corpus_file, require

    require("pyarrow")
    page = tmp_path / "p.html"
    args = ["scan", corpus_file(tmp_path, SENTENCES), "--model", llama, "--out", tmp_path / "s", "--page", page]
    line = assert_one_line_error(invoke([*args, "--max-page-size", "1KB"]), "the page would be about",
                                 "more than --max-page-size 1.0 KB", "e.g. --max-page-size")  # fmt: skip
    assert "max_page_size=" not in line and not page.exists()  # the CLI's flag, not the API's keyword
    assert invoke([*args, "--resume"]).exit_code == 0 and page.exists()


def test_an_attribution_csv_counts_its_token_labels():
    """A CSV row of an attribution holds a query's and a key's label: long tokens make a long CSV, and the estimate
    follows them (at 6 characters a label it would be 16x too low)."""
    words = " ".join("a" * 300 + str(i) for i in range(12))
    assert_refused_then_estimated(["attribute", words, "--format", "csv"], "x 12 rows x 12 keys of the attribution")
