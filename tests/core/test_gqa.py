"""Grouped-query attention (--kv-heads G): tau query heads share G key/value heads."""

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from qkv_cli.cli import app
from qkv_cli.core.settings import Settings
from qkv_cli.errors import QkvError
from qkv_cli.pipeline.seeded import run

runner = CliRunner()
TEXT = "the quick brown fox jumps over the lazy dog"


def invoke(*args):
    return runner.invoke(app, list(args), env={"COLUMNS": "100"})


@pytest.mark.parametrize("G", [1, 2, 4])
def test_shapes_and_head_mapping(G):
    r = run(TEXT, Settings(d=16, tau=4, kv_heads=G, causal=True))
    m = 9
    assert r.Wq.shape == (4, 16, 4) and r.Wk.shape == r.Wv.shape == (G, 16, 4)
    assert r.Q.shape == (4, m, 4) and r.K.shape == r.V.shape == (G, m, 4)
    assert r.weights.shape == r.scores.shape == (4, m, m) and r.heads.shape == (4, m, 4)
    for j in range(4):  # query head j reads key/value head j // (tau / G)
        g = j // (4 // G)
        np.testing.assert_allclose(r.scores[j], r.Q[j] @ r.K[g].T * r.scale, atol=1e-12)


def test_G_equal_tau_is_ordinary_multi_head_attention():
    a, b = run(TEXT, Settings(d=16, tau=4)), run(TEXT, Settings(d=16, tau=4, kv_heads=4))
    np.testing.assert_array_equal(a.output, b.output)


@pytest.mark.parametrize("extra", [{}, {"causal": True}, {"window": 3}])
def test_both_kernels_agree(extra):
    a = run(TEXT, Settings(d=24, tau=6, kv_heads=2, kernel="vectorized", **extra))
    b = run(TEXT, Settings(d=24, tau=6, kv_heads=2, kernel="loop", **extra))
    np.testing.assert_allclose(a.weights, b.weights, rtol=0, atol=1e-12)
    np.testing.assert_allclose(a.output, b.output, rtol=0, atol=1e-12)


@pytest.mark.parametrize(
    "G,message",
    [(3, r"--kv-heads \(3\) must divide tau \(4\): use one of 1, 2, 4"), (0, r"--kv-heads \(0\) must divide tau")],
)
def test_bad_kv_heads(G, message):
    with pytest.raises(QkvError, match=message):
        Settings(d=16, tau=4, kv_heads=G)


def test_cli_error_and_export(tmp_path):
    r = invoke("run", TEXT, "--d", "16", "--tau", "4", "--kv-heads", "3")
    assert r.exit_code == 2 and "--kv-heads (3) must divide tau (4)" in r.output
    out = tmp_path / "g.npz"
    r = invoke(
        "run",
        TEXT,
        "--d",
        "16",
        "--tau",
        "4",
        "--kv-heads",
        "2",
        "--save-npz",
        str(out),
        "--head",
        "3",
        "--show",
        "k,weights",
    )
    assert r.exit_code == 0, r.output
    assert "kv_heads G=2" in r.output and "K^[1] = H W_1^k" in r.output
    z = np.load(out, allow_pickle=False)
    assert z["Wk"].shape == z["Wv"].shape == (2, 16, 4) and z["K"].shape == z["V"].shape == (2, 9, 4)
    assert z["Wq"].shape == (4, 16, 4) and z["Q"].shape == (4, 9, 4)
    assert z["weights"].shape == (4, 9, 9) and z["heads"].shape == (4, 9, 4)


def test_shapes_prints_the_mapping_and_the_savings():
    r = invoke("shapes", "--d", "512", "--tau", "8", "--m", "30", "--kv-heads", "2")
    assert r.exit_code == 0, r.output
    assert "query heads -> kv head: 0..3 -> 0, 4..7 -> 1" in r.output
    assert "393,216 fewer parameters" in r.output  # 2 * (8 - 2) * 512 * 64
    assert "37.5% saved" in r.output
    r = invoke("shapes", "--d", "512", "--tau", "8", "--m", "30", "--kv-heads", "2", "--format", "json")
    doc = json.loads(r.stdout)
    assert doc["kv_heads"] == 2 and doc["kv_head_of_query_head"] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert doc["params_saved"] == 393_216 and doc["count"]["K"] == 2 and doc["params"]["W_k"] == 2 * 512 * 64
    r = invoke("shapes", "--d", "512", "--tau", "8", "--kv-heads", "3")
    assert r.exit_code == 2 and "must divide tau (8)" in r.output


@pytest.mark.reference
@pytest.mark.parametrize("causal", [False, True])
def test_matches_pytorch_enable_gqa(torch, causal):
    r = run(TEXT, Settings(d=32, tau=8, kv_heads=2, causal=causal))
    q, k, v = (torch.from_numpy(a) for a in (r.Q, r.K, r.V))
    out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=r.scale, enable_gqa=True)
    np.testing.assert_allclose(r.heads, out.numpy(), rtol=0, atol=1e-12)
