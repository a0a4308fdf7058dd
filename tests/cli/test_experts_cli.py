"""`qkv run --show experts` and the router arrays of the exports, on tiny MoE checkpoints written with NumPy."""

from __future__ import annotations

import json

import numpy as np
import pytest
from tiny import TINY, make_checkpoint
from typer.testing import CliRunner

from qkv_cli.cli import app
from qkv_cli.models import load_model

TEXT = "the cat sat on the mat"


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("moe")
    return {f: make_checkpoint(root / f, f) for f in ("mixtral", "qwen3_moe", "llama")}


def invoke(*args):
    return CliRunner().invoke(app, list(args))


def test_show_experts_prints_each_tokens_chosen_experts_and_weights(folders):
    r = invoke("run", TEXT, "--model", str(folders["mixtral"]), "--show", "experts", "--layer", "0,1")
    assert r.exit_code == 0, r.output
    run = load_model(folders["mixtral"]).run(TEXT)
    for l in (0, 1):
        assert f"layer {l}: experts per token (weight g)" in r.output
        for i in range(len(run.labels)):  # the row of token i: its two experts with their weights, best first
            e, g = run.router_top[l, i], run.router_weights[l, i]
            assert f"{e[0]} ({g[0]:.2f})" in r.output and f"{e[1]} ({g[1]:.2f})" in r.output
    assert "weights" not in r.output.split("layer 0: experts")[0]  # only the routing was asked for


def test_a_dense_layer_of_a_moe_model_says_so(folders):
    r = invoke("run", TEXT, "--model", str(folders["qwen3_moe"]), "--show", "weights,experts", "--layer", "1")
    assert r.exit_code == 0 and "layer 1: a dense MLP (no experts)" in r.output, r.output


@pytest.mark.parametrize(
    "args, fragment",
    [
        (("--model", "llama"), "has a dense MLP, no experts to show"),
        ((), "needs a mixture-of-experts checkpoint (--model)"),
    ],
)
def test_show_experts_without_experts_is_one_line_exit_2(folders, args, fragment):
    args = tuple(str(folders[a]) if a in folders else a for a in args)
    r = invoke("run", TEXT, *args, "--show", "experts")
    assert r.exit_code == 2 and fragment in r.output and r.output.count("\n") == 1, r.output


def test_json_and_npz_hold_router_top_and_router_weights(folders, tmp_path):
    run = load_model(folders["qwen3_moe"]).run(TEXT)
    L, m, k = TINY["L"], len(run.labels), 2
    r = invoke("run", TEXT, "--model", str(folders["qwen3_moe"]), "--format", "json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert np.array(doc["router_top"]).shape == np.array(doc["router_weights"]).shape == (L, m, k)
    np.testing.assert_array_equal(doc["router_top"], run.router_top)
    assert all(type(e) is int for row in doc["router_top"][0] for e in row)  # expert indices, not floats
    assert doc["router_top"][1] == [[-1, -1]] * m  # layer 1 is dense (mlp_only_layers)
    npz = tmp_path / "a.npz"
    r = invoke("run", TEXT, "--model", str(folders["qwen3_moe"]), "--save-npz", str(npz))
    assert r.exit_code == 0, r.output
    with np.load(npz) as z:
        np.testing.assert_array_equal(z["router_top"], run.router_top)
        np.testing.assert_allclose(z["router_weights"], run.router_weights, rtol=1e-5)
        assert z["router_top"].dtype == np.int64
    np.testing.assert_allclose(run.router_weights[0].sum(-1), 1, rtol=1e-6)  # norm_topk_prob: rows sum to 1


def test_a_dense_model_exports_no_router_arrays(folders):
    doc = json.loads(invoke("run", TEXT, "--model", str(folders["llama"]), "--format", "json").stdout)
    assert "router_top" not in doc and "router_weights" not in doc


def test_shapes_names_the_experts_and_counts_their_parameters(folders):
    r = invoke("shapes", "--model", str(folders["qwen3_moe"]), "--format", "json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert (doc["experts"], doc["top_k"], doc["d_expert"], doc["dense_mlp_layers"]) == (4, 2, 12, [1])
    assert doc["parameters"]["W_up_experts"] == {"shape": [16, 12], "count": 4, "params": 4 * 16 * 12}
    head = doc["parameters"]["lm_head"]["params"]  # the tiny checkpoint stores no output head
    assert doc["total_parameters"] - head == doc["file_parameters"]  # every stored expert counted
    r = invoke("shapes", "--model", str(folders["mixtral"]))
    assert "experts=4 top_k=2" in r.output and "W_router" in r.output


def test_csv_rows_of_the_routing(folders):
    r = invoke("run", TEXT, "--model", str(folders["mixtral"]), "--show", "experts", "--format", "csv", "--layer", "1")
    assert r.exit_code == 0, r.output
    lines = r.stdout.strip().split("\n")
    run = load_model(folders["mixtral"]).run(TEXT)
    rows = [line.split(",") for line in lines[1:]]
    assert lines[0].startswith("layer,matrix") and len(rows) == 2 * len(run.labels)
    first = rows[0]
    assert first[:6] == ["1", "experts", "", "0", str(run.router_top[1, 0, 0]), run.labels[0]]
    assert abs(float(first[-1]) - run.router_weights[1, 0, 0]) < 1e-6


def test_the_python_api_returns_the_routing(folders):
    import qkv_cli as qkv

    r = qkv.run(TEXT, model=str(folders["mixtral"]))
    top, weights = r.routing
    run = load_model(folders["mixtral"]).run(TEXT)
    np.testing.assert_array_equal(top, run.router_top)
    np.testing.assert_allclose(weights, run.router_weights, rtol=1e-5)
    assert qkv.run(TEXT, model=str(folders["llama"])).routing is None
