"""Cross-attention: queries from the text X, keys and values from the context Y (--context, --context-file)."""

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from qkv_cli.cli import app
from qkv_cli.core.embed import embed
from qkv_cli.core.settings import Settings
from qkv_cli.errors import QkvError
from qkv_cli.pipeline.seeded import run

runner = CliRunner()
X, Y = "the cat sat", "le chat noir mange bien"


def invoke(*args, input=None):
    return runner.invoke(app, list(args), input=input, env={"COLUMNS": "100"})


def test_shapes_are_rectangular_and_keys_come_from_the_context():
    s = Settings(d=16, tau=4)
    r = run(X, s, context=Y)
    m, n = 3, 5
    assert r.Q.shape == (4, m, 4) and r.K.shape == (4, n, 4) and r.V.shape == (4, n, 4)
    assert r.scores.shape == r.weights.shape == (4, m, n) and r.mask.shape == (m, n)
    assert r.heads.shape == (4, m, 4) and r.output.shape == (m, 16)
    assert r.key_labels == Y.split() and r.labels == X.split()
    H_context = embed(Y.split(), 16, 0, "sinusoidal")
    np.testing.assert_allclose(r.K, H_context @ r.Wk, atol=1e-12)  # K = Y W^k, Y with its own positions 0..n-1
    np.testing.assert_allclose(r.Q, r.H @ r.Wq, atol=1e-12)  # Q = X W^q
    np.testing.assert_allclose(r.weights.sum(-1), 1.0, atol=1e-12)


def test_context_equal_to_text_is_self_attention():
    s = Settings(d=8, tau=2)
    a, b = run(X, s), run(X, s, context=X)
    np.testing.assert_array_equal(a.weights, b.weights)
    np.testing.assert_array_equal(a.output, b.output)


@pytest.mark.parametrize(
    "settings,message",
    [
        (Settings(d=8, tau=2, causal=True), "--causal needs self-attention"),
        (Settings(d=8, tau=2, window=2), "--window 2 needs self-attention"),
    ],
)
def test_causal_or_window_with_context_is_a_clear_error(settings, message):
    with pytest.raises(QkvError, match=message):
        run(X, settings, context=Y)


def test_export_gains_context_tokens_and_H_context(tmp_path):
    out = tmp_path / "x.npz"
    r = invoke("run", X, "--context", Y, "--d", "8", "--tau", "2", "--save-npz", str(out), "--format", "json")
    assert r.exit_code == 0, r.output
    z = np.load(out, allow_pickle=False)
    assert list(z["context_tokens"]) == Y.split() and z["H_context"].shape == (5, 8)
    assert z["K"].shape == (2, 5, 4) and z["V"].shape == (2, 5, 4)
    assert z["mask"].shape == (3, 5) and z["weights"].shape == (2, 3, 5)
    assert list(z["tokens"]) == X.split()
    doc = json.loads(r.stdout)
    assert doc["context_tokens"] == Y.split()


def test_table_is_labelled_with_both_token_lists():
    r = invoke("run", X, "--context", Y, "--d", "8", "--tau", "2", "--head", "0", "--show", "k,weights")
    assert r.exit_code == 0, r.output
    assert "cross-attention n=5" in r.output
    assert "K^[0] = Y W_0^k" in r.output
    lines = r.output.splitlines()
    header = next(line for line in lines if "chat" in line and "noir" in line)
    assert "le" in header and "mange" in header
    assert any(line.strip().startswith("cat") for line in lines)


def test_context_file_and_stdin(tmp_path):
    f = tmp_path / "y.txt"
    f.write_text(Y, encoding="utf-8")
    a = invoke("run", X, "--context-file", str(f), "--d", "8", "--tau", "2", "--format", "json")
    b = invoke("run", X, "--context-file", "-", "--d", "8", "--tau", "2", "--format", "json", input=Y)
    assert a.exit_code == b.exit_code == 0, a.output + b.output
    assert json.loads(a.stdout) == json.loads(b.stdout)
    r = invoke("run", "-", "--context-file", "-", input=Y)
    assert r.exit_code == 2 and "stdin can be read once" in r.output


@pytest.mark.parametrize(
    "args,message",
    [
        (["run", X, "--context", Y, "--causal"], "--causal needs self-attention"),
        (["run", X, "--context", Y, "--window", "3"], "--window 3 needs self-attention"),
        (["run", X, "--context", "a", "--context-file", "b"], "give either --context or --context-file"),
        (["run", X, "--context-file", "missing.txt"], "--context-file 'missing.txt' does not exist"),
        (["run", X, "--context", "   "], "--context is empty"),
        (["shapes", "--context", "a b", "--n", "3"], "give either --context"),
        (["heads", X, "--context", "a b c"], "No such option: --context"),  # roles need self-attention
        (["mask", X, "--context", Y, "--causal"], "--causal needs self-attention"),
    ],
)
def test_cli_errors(args, message, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    r = invoke(*args)
    assert r.exit_code == 2, r.output
    assert message in r.output and "Traceback" not in r.output


def test_heatmap_and_shapes_accept_context(tmp_path):
    out = tmp_path / "h.png"
    r = invoke("heatmap", X, "--context", Y, "--d", "8", "--tau", "2", "--out", str(out))
    assert r.exit_code == 0, r.output
    assert out.stat().st_size > 0
    r = invoke("shapes", "--d", "8", "--tau", "2", "--m", "3", "--context", Y, "--format", "json")
    doc = json.loads(r.stdout)
    assert doc["n"] == 5 and doc["matrices"]["K"] == [5, 4] and doc["matrices"]["weights"] == [3, 5]
    r = invoke("shapes", "--d", "8", "--tau", "2", "--m", "3", "--n", "7", "--format", "json")
    assert json.loads(r.stdout)["matrices"]["scores"] == [3, 7]


def test_mask_grid_with_context_is_rectangular():
    r = invoke("mask", X, "--context", Y, "--format", "json")
    doc = json.loads(r.stdout)
    assert doc["m"] == 3 and doc["n"] == 5 and doc["key_tokens"] == Y.split()


@pytest.mark.reference
def test_cross_attention_matches_pytorch(torch):
    s = Settings(d=16, tau=4)
    r = run(X, s, context=Y)
    F = torch.nn.functional
    q, k, v = (torch.from_numpy(a) for a in (r.Q, r.K, r.V))
    out = F.scaled_dot_product_attention(q, k, v, scale=r.scale)
    np.testing.assert_allclose(r.heads, out.numpy(), rtol=0, atol=1e-12)
    w = torch.softmax(q @ k.transpose(-1, -2) * r.scale, dim=-1)
    np.testing.assert_allclose(r.weights, w.numpy(), rtol=0, atol=1e-12)


def test_summary_has_no_distance_or_self_share_across_texts_even_when_m_equals_n():
    r = invoke("run", "the cat sat", "--context", "le chat dort", "--d", "8", "--tau", "2", "--head", "0")
    assert r.exit_code == 0, r.output
    last = [line.split() for line in r.output.splitlines() if line.split()[:1] == ["0"]][-1]
    assert last[-2:] == ["-", "-"]
