"""Keep only what is asked: `--rows A:B` keeps some queries' weights, and when every layer's attention does not
fit `--max-memory`, `qkv run` keeps the `--layer` ones; the refusal gives each option's figure, never one given.

The kept numbers are checked against transformers' float64 forward of the same GGUF file (the rows and layers
cut out of its full attentions), and the refusals against the budget's own arithmetic spelled out here."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from clitools import assert_one_line_error, invoke
from helpers import smollm2_gguf

import qkv_cli.api as qkv
from qkv_cli.core.budget import parse_size
from qkv_cli.errors import QkvError

TEXT = "The cat sat on the mat because it was tired, and the dog watched it from the warm windowsill."
LONG = " ".join(f"word{i % 300}" for i in range(700))  # about 2,500 SmolLM2 tokens


@pytest.fixture(scope="module")
def gguf():
    return smollm2_gguf()


@pytest.fixture(scope="module")
def model(gguf):
    return qkv.load(str(gguf), "float64")


@pytest.fixture(scope="module")
def reference(gguf):
    """ids -> (L, tau, m, m): transformers' eager forward of the same file, in float64 throughout."""
    from decoders import float64_everywhere, float64_twin
    from helpers import reference_import

    torch = reference_import("torch")
    transformers = reference_import("transformers")
    reference_import("gguf")
    reference_import("accelerate")
    ref = transformers.AutoModelForCausalLM.from_pretrained(
        str(gguf.parent), gguf_file=gguf.name, attn_implementation="eager", dtype=torch.float32
    ).eval()
    with float64_everywhere(torch):
        twin = float64_twin(transformers, torch, ref)

    def attentions(ids) -> np.ndarray:
        with float64_everywhere(torch), torch.no_grad():
            out = twin(torch.tensor([list(ids)]), output_attentions=True)
        return np.stack([a[0].numpy() for a in out.attentions])

    return attentions


@pytest.mark.reference
@pytest.mark.parametrize("rows", ["-5:", "3:9", "0:1"])
def test_kept_rows_equal_transformers_rows(model, reference, rows):
    r = qkv.run(TEXT, model=model, rows=rows)
    want = reference(r.ids)
    a, b = (int(x) if x else None for x in rows.split(":"))
    cut = want[:, :, a:b, :]
    assert r.attentions.shape == cut.shape
    np.testing.assert_allclose(r.attentions, cut, atol=1e-12, rtol=0)
    assert list(r.rows) == list(range(len(r.ids)))[a:b]


@pytest.mark.reference
def test_cli_json_holds_the_kept_rows_and_their_positions(gguf, model, reference, tmp_path):
    res = invoke(["run", TEXT, "--model", str(gguf), "--rows", "-4:", "--layer", "-1", "--format", "json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    m = len(doc["ids"])
    assert doc["rows"] == list(range(m - 4, m)) and doc["attention_layers"] == list(range(30))
    got = np.array(doc["attentions"])
    np.testing.assert_allclose(got, reference(doc["ids"])[:, :, -4:, :], atol=1e-12, rtol=0)
    np.testing.assert_array_equal(np.array(doc["layers"]["29"]["weights"]), got[-1])  # the detailed layer: same rows


def test_the_table_names_its_rows_and_measures_distance_from_their_positions(gguf):
    res = invoke(["run", TEXT, "--model", str(gguf), "--rows", "-3:", "--head", "0", "--dtype", "float32"])
    assert res.exit_code == 0, res.output
    m = len(qkv.load(str(gguf), "float32").tokenize(TEXT).ids)
    assert f"m={m} queries {m - 3}..{m - 1} (3 of {m}, --rows)" in res.stdout
    full = qkv.run(TEXT, model=str(gguf), dtype="float32", layer=-1).layer(-1).weights[0]
    last = full[-3:]  # the same head's last three rows, and the distance |i - j| from their own positions
    distance = (last * np.abs(np.arange(m - 3, m)[:, None] - np.arange(m)[None, :])).sum(-1).mean()
    row = next(line for line in res.stdout.splitlines() if re.match(r"\s+0\s+\d", line))
    assert f"{distance:.2f}" in row.split()


def test_npz_holds_kept_layers_when_every_layer_does_not_fit(gguf, tmp_path):
    """A budget that holds one layer's attention but not all 30: --layer 3 keeps layer 3's, exactly."""
    full = qkv.run(LONG, model=str(gguf), dtype="float32", layer=3)
    m = full.attentions.shape[-1]
    one = 9 * m * m * 4
    res = invoke(["run", LONG, "--model", str(gguf), "--dtype", "float32", "--layer", "3", "--max-memory",
                  f"{(30 * one) // 2**20}MiB", "--save-npz", str(tmp_path / "a.npz")])  # fmt: skip
    assert res.exit_code == 0, res.output
    with np.load(tmp_path / "a.npz") as z:
        assert list(z["attention_layers"]) == [3] and z["attentions"].shape == (1, 9, m, m)
        np.testing.assert_array_equal(z["attentions"][0], full.attentions[3])
        assert list(z["rows"]) == list(range(m))


def hint_of(res) -> str:
    return res.output.split("; try ", 1)[1]


def test_a_refusal_gives_each_options_figure(gguf):
    res = invoke(["run", LONG, "--model", str(gguf), "--format", "json", "--max-memory", "1GB"])
    assert_one_line_error(res, "every layer's attention", "more than --max-memory 1.0 GB")
    hint = hint_of(res)
    figures = dict(re.findall(r"(--layer -1|--rows -128:|--dtype float32)[^,]*?([\d.]+ [KMG]B)\)", hint))
    assert set(figures) == {"--layer -1", "--rows -128:", "--dtype float32"}, hint
    needed = parse_size(re.search(r"needs about ([\d.]+ [KMG]B)", res.output).group(1).replace(" ", ""))
    for option, size in figures.items():  # each brings the run down
        assert parse_size(size.replace(" ", "")) < needed, (option, hint)
    assert hint.rstrip().endswith("or a shorter text")


@pytest.mark.parametrize("given", [["--layer", "-1"], ["--rows", "-200:"], ["--dtype", "float32"]])
def test_a_refusal_never_offers_an_option_already_given(gguf, given):
    res = invoke(["run", LONG, "--model", str(gguf), "--format", "json", "--max-memory", "300MB", *given])
    assert_one_line_error(res, "more than --max-memory")
    assert given[0] not in hint_of(res), res.output


def test_rows_are_refused_where_they_mean_nothing(gguf):
    assert_one_line_error(invoke(["run", "a b c", "--rows", "0:1"]), "--rows needs --model")
    assert_one_line_error(invoke(["run", "a b c", "--model", str(gguf), "--rows", "5:9"]), "within 0..3")
    with pytest.raises(QkvError, match="has a step"):
        qkv.run("a b c", model=str(gguf), rows=slice(0, 3, 2))
    with pytest.raises(QkvError, match="rows must be a slice"):
        qkv.run("a b c", model=str(gguf), rows=3)


@pytest.mark.reference
def test_head_keeps_only_those_heads_weights(gguf, reference, tmp_path):
    res = invoke(
        ["run", TEXT, "--model", str(gguf), "--head", "2,7", "--rows", "-3:", "--save-npz", str(tmp_path / "h.npz")]
    )
    assert res.exit_code == 0, res.output
    with np.load(tmp_path / "h.npz") as z:
        assert list(z["attention_heads"]) == [2, 7] and z["attentions"].shape[:3] == (30, 2, 3)
        np.testing.assert_allclose(z["attentions"], reference(z["ids"])[:, [2, 7], -3:, :], atol=1e-12, rtol=0)
