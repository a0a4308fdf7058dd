"""`qkv explain`: the step-by-step trace agrees with `qkv run` on the same settings, and --query adds up."""

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from qkv_cli.cli import app
from qkv_cli.core.numerics import softmax as softmax_rows
from qkv_cli.core.settings import Settings
from qkv_cli.pipeline.seeded import run
from qkv_cli.views.console.trace import trace
from qkv_cli.views.console.zoom import query_zoom

runner = CliRunner()


def invoke(*args):
    return runner.invoke(app, list(args), env={"COLUMNS": "100"})


def as_array(x):
    return np.array([[np.nan if v is None else v for v in row] for row in x], dtype=float)


CASES = [
    [],
    ["--causal"],
    ["--window", "2", "--head", "1"],
    ["--kv-heads", "1", "--head", "1"],
    ["--context", "le chat noir mange"],
    ["--scale", "sqrt", "--kernel", "loop"],
    ["--ablate", "k", "--ablate-with", "noise"],
]


@pytest.mark.parametrize("extra", CASES, ids=[" ".join(c) or "defaults" for c in CASES])
def test_explain_agrees_with_run(extra):
    """Every matrix of the trace equals what `qkv run --format json` prints for the same settings."""
    text = "the cat sat on it"
    e = invoke("explain", text, "--format", "json", *extra)
    assert e.exit_code == 0, e.output
    doc = json.loads(e.stdout)
    head = doc["head"]
    shared = [x for k, x in enumerate(extra) if x != "--head" and (k == 0 or extra[k - 1] != "--head")]
    show = "h,q,k,v,scores,mask,weights,heads,output"
    r = invoke("run", text, "--d", "8", "--tau", "2", "--format", "json", "--head", str(head), "--show", show, *shared)
    assert r.exit_code == 0, r.output
    ran = json.loads(r.stdout)
    assert ran["settings"] == doc["settings"]
    steps, mats = doc["steps"], ran["matrices"]
    g = doc["kv_head"]
    pairs = {
        "H": mats["H"],
        "Q": mats["Q"][0],
        "K": mats["K"][g],
        "V": mats["V"][g],
        "scores": mats["scores"][0],
        "mask": mats["mask"],
        "weights": mats["weights"][0],
        "heads": mats["heads"][0],
        "output": mats["output"],
    }
    for name, expected in pairs.items():
        np.testing.assert_allclose(
            as_array(steps[name]["matrix"]), as_array(expected), rtol=0, atol=1e-12, err_msg=name
        )


def test_explain_defaults_are_small_and_walk_every_step():
    r = invoke("explain", "the cat sat")
    assert r.exit_code == 0, r.output
    assert "d=8 tau=2 d_k=4" in r.output
    for piece in (
        "H: one row per token",
        "W_0^q",
        "W_0^k",
        "W_0^v",
        "Q^[0] = H W_0^q",
        "K^[0] = H W_0^k",
        "V^[0] = H W_0^v",
        "S = Q^[0] K^[0]^T * scale",
        "Mask",
        "alpha = Softmax(S + Mask)",
        "head_0 = alpha V^[0]",
        "concat(head_0..head_1)",
        "W^o",
        "output = concat(heads) W^o",
    ):
        assert piece in r.output, piece
    assert "Step 14." in r.output


def test_explain_without_text_uses_a_sample():
    r = invoke("explain", "--format", "json")
    assert r.exit_code == 0, r.output
    assert len(json.loads(r.stdout)["tokens"]) > 3


def test_trace_core_matches_pipeline_and_concat_holds_every_head():
    res = run("a b c d", Settings(d=12, tau=3, causal=True))
    tr = trace(res, head=2)
    np.testing.assert_allclose(tr["weights"].matrix, res.weights[2], atol=1e-12)
    np.testing.assert_allclose(tr["concat"].matrix[:, 8:12], res.heads[2], atol=1e-12)
    np.testing.assert_allclose(tr["output"].matrix, res.output, atol=1e-12)
    assert tr["concat"].matrix.shape == (4, 12)


def test_query_zoom_adds_up():
    res = run("the cat sat on it", Settings(d=8, tau=2, window=2))
    tr = trace(res, 1)
    z = query_zoom(tr, 3, res)
    np.testing.assert_allclose(z["dot"], res.Q[1, 3] @ res.K[1].T, atol=1e-12)
    np.testing.assert_allclose(z["weights"], res.weights[1, 3], atol=1e-12)
    np.testing.assert_allclose(z["terms"].sum(axis=0), res.heads[1, 3], atol=1e-12)
    assert z["weights"][0] == 0 and np.isneginf(z["score"][0])  # outside the window: exactly zero
    assert z["weights"].sum() == pytest.approx(1.0)


def test_explain_query_table_shows_each_term():
    r = invoke("explain", "the cat sat", "--query", "2", "--causal")
    assert r.exit_code == 0, r.output
    for piece in ("Query i=2", "q_2 . k_t", "* scale", "+ Mask_2,t", "exp(s_t - max)", "alpha_2,t v_t", "sum"):
        assert piece in r.output, piece
    r = invoke("explain", "the cat sat", "--query", "0", "--causal", "--format", "json")
    q = json.loads(r.stdout)["query"]
    assert q["weights"] == [1.0, 0.0, 0.0] and q["mask"] == [0.0, None, None]


@pytest.mark.parametrize(
    "args,message",
    [
        (["--query", "9"], "--query 9 does not exist: queries are numbered 0..2"),
        (["--head", "2"], "--head 2 does not exist: heads are numbered 0..1"),
        (["--format", "csv"], "'csv' is not one of"),
        (["--d", "9"], "d (9) must be divisible by tau (2)"),
    ],
)
def test_explain_errors(args, message):
    r = invoke("explain", "a b c", *args)
    assert r.exit_code == 2
    assert message in r.output
    assert "Traceback" not in r.output


def test_softmax_rows_masked_row_is_zero():
    x = np.array([[0.0, -np.inf], [-np.inf, -np.inf]])
    np.testing.assert_array_equal(softmax_rows(x), [[1.0, 0.0], [0.0, 0.0]])


# ---- --model: one head of one layer of a real checkpoint, biases included --------------------------------------

MODEL_CASES = [([], 0, 5), (["--layer", "1"], 8, 1), (["--layer", "-1", "--kernel", "loop"], 11, 5)]


@pytest.mark.parametrize("extra,head,layer", MODEL_CASES, ids=["last layer", "layer 1 head 8", "layer -1 loop"])
def test_explain_model_agrees_with_run(minilm, extra, head, layer):
    """explain --model recomputes Q = H W_j^q + b_j^q, ..., output = concat W^o + b^o; run --model gives the same."""
    text = "The cat sat on the mat because it was warm."
    e = invoke("explain", text, "--model", str(minilm), "--head", str(head), "--format", "json", *extra)
    assert e.exit_code == 0, e.output
    doc = json.loads(e.stdout)
    assert doc["head"] == doc["kv_head"] == head and doc["settings"]["layer"] == layer
    show = "h,q,k,v,scores,mask,weights,heads,output"
    args = ["--model", str(minilm), "--layer", str(layer), "--head", str(head), "--show", show, "--format", "json"]
    r = invoke("run", text, *args, *extra[2:])
    assert r.exit_code == 0, r.output
    ran = json.loads(r.stdout)
    assert ran["settings"] == doc["settings"] and ran["labels"] == doc["labels"] and doc["labels"][0] == "[CLS]"
    steps, mats = doc["steps"], ran["layers"][str(layer)]
    pairs = {"H": mats["H"], "mask": mats["mask"], "output": mats["output"], "K": mats["K"][head], "V": mats["V"][head]}
    pairs |= {name: mats[name][0] for name in ("Q", "scores", "weights", "heads")}  # --head J: only head J
    for name, expected in pairs.items():
        np.testing.assert_allclose(
            as_array(steps[name]["matrix"]), as_array(expected), rtol=1e-9, atol=1e-9, err_msg=name
        )
    # the weights and biases shown are the checkpoint's, read through the model API (not through explain)
    from qkv_cli.models import load_model

    w = load_model(minilm, dtype="float64").layer_weights(layer)
    for name in ("Wq", "Wk", "Wv", "bq", "bk", "bv"):
        np.testing.assert_array_equal(as_array(np.atleast_2d(steps[name]["matrix"])), np.atleast_2d(w[name][head]))
    np.testing.assert_array_equal(as_array(steps["Wo"]["matrix"]), w["Wo"])
    np.testing.assert_array_equal(as_array(steps["bo"]["matrix"])[0], w["bo"])
    assert steps["Q"]["formula"] == f"Q^[{head}] = H W_{head}^q + b_{head}^q"
    assert steps["output"]["formula"] == "output = concat(heads) W^o + b^o"


def test_explain_model_table_walks_every_step_at_80_columns(minilm):
    r = runner.invoke(app, ["explain", "the cat sat", "--model", str(minilm)], env={"COLUMNS": "80"})
    assert r.exit_code == 0, r.output
    assert "(bert) layer 5 of 0..5" in r.output
    for piece in ("b_0^q", "Q^[0] = H W_0^q + b_0^q", "concat(head_0..head_11)", "b^o", "W^o + b^o", "Step 18."):
        assert piece in r.output, piece
    assert "showing 48 of 384 rows and" in r.output and "--format json shows all" in r.output
    assert max(len(line.rstrip()) for line in r.output.splitlines()) <= 80


def test_explain_model_query_fits_80_columns(minilm):
    args = ["explain", "the cat sat on the mat", "--model", str(minilm), "--layer", "1", "--head", "8", "--query", "3"]
    r = runner.invoke(app, args, env={"COLUMNS": "80"})
    assert r.exit_code == 0, r.output
    assert "of d_k=32 entries" in r.output and "q_3 . k_t" in r.output and "alpha_3,t v_t" in r.output
    assert max(len(line.rstrip()) for line in r.output.splitlines()) <= 80
    j = json.loads(invoke(*args, "--format", "json").stdout)["query"]
    assert len(j["q"]) == 32 and j["weights"] == pytest.approx(j["exp"] / np.sum(j["exp"]))


@pytest.mark.parametrize(
    "args,fragment",
    [
        (["--layer", "1", "--layer", "2"], "explain walks one layer"),
        (["--layer", "6"], "layer 6 does not exist"),
        (["--head", "12"], "--head 12 does not exist: heads are numbered 0..11"),
        (["--d", "64"], "--d cannot be used with --model"),
        (["--causal"], "--causal cannot be used with --model"),
        (["--query", "9"], "--query 9 does not exist"),
    ],
)
def test_explain_model_errors(minilm, args, fragment):
    r = invoke("explain", "a b c", "--model", str(minilm), *args)
    assert r.exit_code == 2 and fragment in r.stderr and r.stderr.count("\n") == 1


@pytest.mark.reference
def test_explain_gpt2_model_is_causal_and_agrees_with_run(gpt2_dir):
    e = invoke(
        "explain", "the cat sat on it", "--model", str(gpt2_dir), "--layer", "0", "--head", "3", "--format", "json"
    )
    assert e.exit_code == 0, e.output
    steps = json.loads(e.stdout)["steps"]
    assert "LN_1" in steps["H"]["note"]
    args = ["--model", str(gpt2_dir), "--layer", "0", "--head", "3", "--show", "weights,output", "--format", "json"]
    mats = json.loads(invoke("run", "the cat sat on it", *args).stdout)["layers"]["0"]
    weights = as_array(steps["weights"]["matrix"])
    np.testing.assert_allclose(weights, as_array(mats["weights"][0]), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(as_array(steps["output"]["matrix"]), as_array(mats["output"]), rtol=1e-9, atol=1e-12)
    assert np.all(weights[np.triu_indices(len(weights), 1)] == 0)  # causal: no weight on a later key
