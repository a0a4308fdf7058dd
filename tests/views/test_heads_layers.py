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
