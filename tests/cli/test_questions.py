"""The README's "Questions qkv answers": each command gives the answer the section claims."""

import json

import numpy as np
from typer.testing import CliRunner

from qkv_cli.cli import app

runner = CliRunner()
TEXT = "The cat sat on the mat because it was warm."


def invoke(*args):
    r = runner.invoke(app, list(args), env={"COLUMNS": "100"})
    assert r.exit_code == 0, r.output
    return r


def heads_json(*args):
    return json.loads(invoke("heads", TEXT, "--format", "json", *args).stdout)["heads"]


def test_q1_dimensions_of_V():
    one = json.loads(invoke("shapes", "--d", "512", "--tau", "1", "--m", "30", "--format", "json").stdout)
    assert one["matrices"]["V"] == [30, 512] and one["count"]["V"] == 1
    eight = json.loads(invoke("shapes", "--d", "512", "--tau", "8", "--m", "30", "--format", "json").stdout)
    assert eight["matrices"]["V"] == [30, 64] and eight["count"]["V"] == 8 and eight["matrices"]["concat"] == [30, 512]


def test_q2_explain_shows_how_q_k_v_are_computed():
    doc = json.loads(invoke("explain", "the cat", "--format", "json").stdout)
    H = np.array(doc["steps"]["H"]["matrix"])
    for name, W in (("Q", "Wq"), ("K", "Wk"), ("V", "Wv")):
        np.testing.assert_allclose(doc["steps"][name]["matrix"], H @ np.array(doc["steps"][W]["matrix"]), atol=1e-12)
    assert doc["settings"]["d"] == 8 and doc["settings"]["tau"] == 2


def test_q3_identity_projection_attends_to_itself():
    identity = heads_json("--d", "64", "--tau", "2", "--projection", "identity")
    random = heads_json("--d", "64", "--tau", "2", "--projection", "random")
    assert all(h["role"] == "self" and h["self"] > 0.8 for h in identity)
    assert all(h["self"] < 0.5 for h in random)


def test_q4_without_the_scale_the_softmax_saturates():
    auto, none, sqrt = (heads_json("--d", "512", "--tau", "2", "--scale", s) for s in ("auto", "none", "sqrt"))
    for a, n, s in zip(auto, none, sqrt, strict=True):
        assert a["entropy"] > n["entropy"] > s["entropy"]
        assert a["max_weight"] < n["max_weight"] <= s["max_weight"]
        assert a["softmax_grad"] > 0.3 and s["softmax_grad"] < 1e-3  # saturated: no gradient flows back


def test_q5_causal_and_window():
    doc = json.loads(invoke("mask", "a b c d e", "--causal", "--window", "3", "--format", "json").stdout)
    allowed = np.array(doc["allowed"])
    i, t = np.indices(allowed.shape)
    np.testing.assert_array_equal(allowed, (t <= i) & (t > i - 3))
    assert doc["removed_by"][0][1] == ["causal"] and doc["removed_by"][4][0] == ["window"]


def test_q6_cross_attention_takes_keys_and_values_from_the_context():
    doc = json.loads(
        invoke(
            "run",
            "the cat sat",
            "--context",
            "le chat dort bien",
            "--d",
            "8",
            "--tau",
            "2",
            "--format",
            "json",
            "--show",
            "q,k,v,weights",
        ).stdout
    )
    m = doc["matrices"]
    assert np.array(m["Q"]).shape == (2, 3, 4) and np.array(m["K"]).shape == (2, 4, 4)
    assert np.array(m["weights"]).shape == (2, 3, 4) and doc["context_tokens"] == ["le", "chat", "dort", "bien"]


def test_q7_ablating_v_keeps_the_weights_and_changes_the_output():
    base = ["run", "the cat sat", "--d", "8", "--tau", "2", "--format", "json", "--show", "weights,output"]
    intact = json.loads(invoke(*base).stdout)
    ablated = json.loads(invoke(*base, "--ablate", "v").stdout)
    assert ablated["matrices"]["weights"] == intact["matrices"]["weights"]
    assert ablated["matrices"]["output"] != intact["matrices"]["output"]
    assert ablated["ablation"]["max_change"]["weights"] == 0 < ablated["ablation"]["max_change"]["output"]
