"""qkv.shapes and qkv.mask: the numbers checked against hand-worked sizes and masks, and equal to what the CLI prints
(`qkv shapes --format json`, `qkv mask --format json`); bad input raises QkvError with one line."""

from __future__ import annotations

import json

import numpy as np
import pytest
from clitools import invoke
from helpers import causal_allowed, window_allowed
from tiny import make_checkpoint

import qkv_cli as qkv

TEXT = "the cat sat on the mat"  # 6 word tokens


@pytest.fixture(scope="module")
def tiny_gemma2(tmp_path_factory):
    return make_checkpoint(tmp_path_factory.mktemp("plans") / "gemma2", "gemma2")


def cli_json(*args) -> dict:
    result = invoke([str(a) for a in args] + ["--format", "json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_shapes_are_the_hand_worked_sizes_and_the_clis():
    doc = qkv.shapes(d=512, heads=8, m=30)
    shapes = doc["matrices"]
    assert (doc["d"], doc["tau"], doc["m"], doc["d_k"]) == (512, 8, 30, 64)
    assert shapes["W_q"] == [512, 64] and shapes["Q"] == [30, 64] and shapes["scores"] == [30, 30]
    assert shapes["concat"] == [30, 512] and shapes["W_o"] == [512, 512]
    assert doc["total_params"] == 4 * 512 * 512  # W^q, W^k, W^v (8 heads of 512 x 64 each) and W^o
    assert doc == cli_json("shapes", "--d", 512, "--tau", 8, "--m", 30)
    grouped = qkv.shapes(TEXT, d=64, heads=4, kv_heads=2, context="a b c")
    assert (grouped["m"], grouped["n"]) == (6, 3) and grouped["matrices"]["K"] == [3, 16]
    assert grouped == cli_json("shapes", TEXT, "--d", 64, "--tau", 4, "--kv-heads", 2, "--context", "a b c")


def test_shapes_of_a_checkpoint_count_its_files(tiny_gemma2):
    doc = qkv.shapes(model=tiny_gemma2, m=10)
    assert doc["family"] == "gemma2" and doc["total_parameters"] == doc["file_parameters"] > 0
    assert doc["kv_cache_bytes"] == 10 * doc["kv_cache_bytes_per_token"]
    assert doc == cli_json("shapes", "--model", tiny_gemma2, "--m", 10)
    assert qkv.shapes(model=qkv.load(str(tiny_gemma2)), m=10) == doc


def test_a_mask_is_the_hand_worked_grid_with_its_rules():
    mk = qkv.mask(TEXT, causal=True, window=3)
    m = 6
    np.testing.assert_array_equal(mk.allowed, causal_allowed(m) & window_allowed(m, 3))
    np.testing.assert_array_equal(mk.mask, np.where(mk.allowed, 0.0, -np.inf))
    assert mk.removed_by[0][3] == ["causal"] and mk.removed_by[5][1] == ["window"] and mk.removed_by[4][4] == []
    assert mk.counts == {"causal": 15, "window": 6, "allowed": 15} and mk.tokens == TEXT.split()
    assert mk.doc() == cli_json("mask", TEXT, "--causal", "--window", 3)
    chunked = qkv.mask(TEXT, causal=True, chunk=4)
    assert chunked.removed_by[4][0] == ["chunk"] and not chunked.allowed[5, 3] and chunked.allowed[5, 4]


def test_a_checkpoints_mask_is_its_own_per_kind_of_layer(tiny_gemma2):
    masks = qkv.mask(TEXT, model=tiny_gemma2)
    assert [x.layer_type for x in masks] == ["sliding_attention", "full_attention"]
    m = len(masks[0].tokens)
    np.testing.assert_array_equal(masks[1].allowed, causal_allowed(m))
    one = qkv.mask(TEXT, model=tiny_gemma2, layer=1)
    assert isinstance(one, qkv.Mask) and one.layer == 1
    assert one.doc() == cli_json("mask", TEXT, "--model", tiny_gemma2, "--layer", 1)


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: qkv.shapes(d=10, heads=3), "divisible"),
        (lambda: qkv.shapes(dtype="float16"), "dtype"),
        (lambda: qkv.mask(TEXT, window=0), "window"),
        (lambda: qkv.mask(TEXT, layer=1), "layer needs model="),
        (lambda: qkv.mask(3), "text must be a str"),
    ],
)
def test_bad_input_raises_one_line(call, message):
    with pytest.raises(qkv.QkvError, match=message) as got:
        call()
    assert "\n" not in str(got.value)


def test_a_checkpoint_refuses_what_it_fixes(tiny_gemma2):
    with pytest.raises(qkv.QkvError, match="causal cannot be used with model="):
        qkv.mask(TEXT, model=tiny_gemma2, causal=True)
    with pytest.raises(qkv.QkvError, match="heads cannot be used with model="):
        qkv.shapes(model=tiny_gemma2, heads=4)


def test_models_lists_what_qkv_models_prints():
    doc = json.loads(invoke(["models", "--format", "json"]).stdout)
    assert isinstance(doc, list) and json.loads(json.dumps(qkv.find_models(), default=str)) == doc
