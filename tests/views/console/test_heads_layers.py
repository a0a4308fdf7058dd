"""`qkv heads --model M --layer L`: only the chosen layers' heads, numbered as in the model."""

from __future__ import annotations

import json

import pytest
from clitools import assert_one_line_error, invoke
from tiny import TINY, make_checkpoint


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return make_checkpoint(tmp_path_factory.mktemp("heads") / "gpt2", "gpt2")


def heads_json(*args):
    result = invoke(["heads", "the cat sat on the mat", *map(str, args), "--format", "json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_every_layer_by_default(folder):
    doc = heads_json("--model", folder)
    assert sorted({h["layer"] for h in doc["heads"]}) == list(range(TINY["L"]))


@pytest.mark.parametrize("layers, expected", [(["1"], [1]), (["-1"], [TINY["L"] - 1]), (["1", "0"], [1, 0])])
def test_chosen_layers_only(folder, layers, expected):
    args = [a for layer in layers for a in ("--layer", layer)]
    doc = heads_json("--model", folder, *args)
    seen = []
    for h in doc["heads"]:
        if h["layer"] not in seen:
            seen.append(h["layer"])
    assert seen == expected
    full = {(h["layer"], h["head"]): h for h in heads_json("--model", folder)["heads"]}
    for h in doc["heads"]:  # the same numbers as in the whole model's table
        assert h["entropy"] == pytest.approx(full[(h["layer"], h["head"])]["entropy"])


def test_table_names_the_real_layer(folder):
    result = invoke(["heads", "the cat sat on the mat", "--model", str(folder), "--layer", "1"])
    assert result.exit_code == 0, result.output
    assert "layer 1:" in result.stdout and "layer 0:" not in result.stdout


def test_a_layer_that_does_not_exist(folder):
    result = invoke(["heads", "the cat", "--model", str(folder), "--layer", str(TINY["L"])])
    assert_one_line_error(result, "--layer", "does not exist")


@pytest.mark.parametrize("column", ["entropy", "first", "induction", "mean_distance"])
def test_sort_and_top(folder, column):
    """--sort COLUMN orders the heads largest first (--ascending: smallest first); --top N keeps the first N."""
    every = heads_json("--model", folder)["heads"]
    ranked = sorted(every, key=lambda h: -h[column])
    doc = heads_json("--model", folder, "--sort", column, "--top", 3)
    assert [h[column] for h in doc["heads"]] == [h[column] for h in ranked[:3]]
    rising = heads_json("--model", folder, "--sort", column, "--ascending")["heads"]
    assert [h[column] for h in rising] == sorted(h[column] for h in every) and len(rising) == len(every)
    assert len(heads_json("--model", folder, "--top", 2)["heads"]) == 2  # the model's order, cut
    table = invoke(["heads", "the cat sat on the mat", "--model", str(folder), "--sort", column, "--top", 2])
    assert table.exit_code == 0, table.output
    assert "Roles: layer x head" not in table.stdout and "the 2 heads with the largest" in table.stdout
    csv = invoke(["heads", "the cat sat", "--model", str(folder), "--top", 1, "--format", "csv"]).stdout
    assert len(csv.splitlines()) == 2


def test_sort_refusals(folder):
    assert_one_line_error(invoke(["heads", "the cat", "--model", str(folder), "--top", "0"]), "--top")
    assert_one_line_error(invoke(["heads", "the cat", "--model", str(folder), "--sort", "bogus"]), "--sort")
    assert_one_line_error(invoke(["heads", "the cat", "--model", str(folder), "--ascending"]), "--sort")


def test_one_name_per_role_and_the_induction_columns_explained(folder):
    """The first-token role has one name, without "sink" (its short form a prefix of it); with no repeated token
    the induction and duplicate columns are empty of signal, and the table says --induction-probe fills them."""
    doc = heads_json("--model", folder, "--sort", "first")
    assert doc["heads"][0]["first"] >= 0.5 and doc["heads"][0]["role"] == "first-token"
    table = invoke(["heads", "a cat sat on my mat", "--model", str(folder)]).stdout  # no token repeats
    flat = " ".join(table.split())
    assert "first-token " + "sink" not in flat and "first = first-token" in flat
    assert "--induction-probe N fills them" in flat
    for more in (["--induction-probe", "4"], ["the cat sat on the mat"]):  # probed, or a text with a repeat
        shown = " ".join(invoke(["heads", "--model", str(folder), *more]).stdout.split())
        assert "--induction-probe N fills them" not in shown
