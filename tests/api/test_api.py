"""The Python API (`import qkv_cli as qkv`) used directly: results, figures, pages, head rows, and its errors.

Numbers are checked against an independent formula written here (softmax of Q K^T * scale + Mask from the
result's own Q and K), and the API's results against what the CLI writes for the same options (one pipeline,
two doors)."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from clitools import invoke
from tiny import make_checkpoint

import qkv_cli as qkv


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory):
    return make_checkpoint(
        tmp_path_factory.mktemp("api") / "llama", "llama", config_overrides={"tie_word_embeddings": True}
    )


def softmax_rows(x):  # [..., n] -> rows summing to 1; a row with every key at -inf -> zeros
    top = np.max(x, axis=-1, keepdims=True)
    top = np.where(np.isfinite(top), top, 0.0)
    e = np.exp(x - top)
    s = e.sum(axis=-1, keepdims=True)
    return np.divide(e, s, out=np.zeros_like(e), where=s > 0)


def test_import_is_light_and_names_resolve():
    code = ("import sys, qkv_cli as qkv; f = qkv.run; g = qkv.heatmap; e = qkv.QkvError; "
            "print(sorted(m for m in ('numpy', 'matplotlib', 'tokenizers') if m in sys.modules))")  # fmt: skip
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
    assert {"load", "run", "generate", "attribute", "heatmap", "page", "heads"} <= set(dir(qkv))
    with pytest.raises(AttributeError):
        qkv.no_such_name  # noqa: B018


def test_random_weights_run_matches_the_formula():
    t = qkv.run("the cat sat on the mat", d=64, heads=4, causal=True, seed=3)
    assert isinstance(t, qkv.Layer) and t.kind == "layer"
    assert t.tokens == ["the", "cat", "sat", "on", "the", "mat"]
    assert t.weights.shape == (4, 6, 6) and t.Q.shape == (4, 6, 16) and t.H.shape == (6, 64)
    causal = np.where(np.tril(np.ones((6, 6), bool)), 0.0, -np.inf)
    expected = softmax_rows(np.einsum("jmd,jnd->jmn", t.Q, t.K) / np.sqrt(16) + causal)
    np.testing.assert_allclose(t.weights, expected, atol=1e-12)
    np.testing.assert_allclose(t.output, np.concatenate(list(t.heads), axis=1) @ t.Wo, atol=1e-12)


def test_the_api_and_the_cli_give_the_same_numbers(tmp_path):
    path = tmp_path / "run.npz"
    result = invoke(["run", "the cat sat on the mat", "--d", "32", "--heads", "2", "--window", "3", "--seed", "5",
                     "--save-npz", path])  # fmt: skip
    assert result.exit_code == 0, result.output
    cli = np.load(path)
    t = qkv.run("the cat sat on the mat", d=32, heads=2, window=3, seed=5)
    for name in ("H", "Q", "K", "V", "scores", "weights", "output"):
        np.testing.assert_array_equal(getattr(t, name), cli[name])
    np.testing.assert_array_equal(t.arrays()["weights"], cli["weights"])


@pytest.mark.parametrize(
    "call, fragment",
    [
        (lambda: qkv.run("x", d=10, heads=3), "divisible by tau"),
        (lambda: qkv.run("x", layer=2), "--layer needs --model"),
        (lambda: qkv.run("x", dtype="float16"), "unknown dtype"),
        (lambda: qkv.run("x", kernel="fast"), "kernel"),
        (lambda: qkv.run(42), "text must be a str"),
        (lambda: qkv.run("x", max_memory="lots"), "not a size"),
        (lambda: qkv.run("x", model=3.5), "model must be"),
        (lambda: qkv.generate("x"), "needs model="),
        (lambda: qkv.attribute("x", method="rollout"), "rollout"),
        (lambda: qkv.load("/no/such/folder"), "no/such/folder"),
        (lambda: qkv.heatmap(np.ones((2, 3, 3)), heads=[5]), "head 5 does not exist"),
        (lambda: qkv.heatmap(np.ones(3)), "must be (m, n)"),
        (lambda: qkv.heatmap(np.full((2, 2), np.nan)), "NaN"),
        (lambda: qkv.heatmap(np.ones((2, 2)), ["a"]), "1 tokens"),
        (lambda: qkv.heatmap(np.ones((2, 2)), scale="cubic"), "unknown scale"),
        (lambda: qkv.page(np.ones((2, 2))), "page takes a result"),
        (lambda: qkv.heads("text"), "heads takes results"),
    ],
)
def test_bad_arguments_raise_the_clis_one_line_error(call, fragment):
    with pytest.raises(qkv.QkvError) as info:
        call()
    message = str(info.value)
    assert fragment in message and "\n" not in message


def test_heatmap_returns_a_figure_and_writes_nothing(tmp_path, monkeypatch):
    from matplotlib.figure import Figure

    monkeypatch.chdir(tmp_path)
    t = qkv.run("the cat sat", d=16, heads=4, causal=True)
    fig = qkv.heatmap(t, heads=[0, 3])
    assert isinstance(fig, Figure) and list(tmp_path.iterdir()) == []
    texts = {x.get_text() for x in fig.findobj(lambda a: hasattr(a, "get_text"))}
    assert {"head 0", "head 3"} <= texts and "head 1" not in texts
    assert fig._repr_png_().startswith(b"\x89PNG")
    fig.savefig(tmp_path / "a.png")
    assert (tmp_path / "a.png").read_bytes().startswith(b"\x89PNG")


def test_heatmap_of_raw_arrays_like_a_transformerlens_pattern():
    pattern = np.random.default_rng(0).dirichlet(np.ones(4), size=(1, 3, 4))  # (batch 1, heads, q, k)
    fig = qkv.heatmap(pattern, ["a", "b", "c", "d"], heads=[1, 2], title="my pattern")
    texts = {x.get_text() for x in fig.findobj(lambda a: hasattr(a, "get_text"))}
    assert {"my pattern", "head 1", "head 2", "a", "d"} <= texts


def test_page_inline_and_saved(tmp_path):
    t = qkv.run("the cat sat on the mat", d=16, heads=2, causal=True)
    page = qkv.page(t)
    assert page.html.lstrip().lower().startswith("<!doctype html")
    inline = t._repr_html_()
    assert inline.startswith("<iframe") and 'sandbox="allow-scripts"' in inline and "<script" not in inline
    assert "&lt;script" in inline  # the page travels escaped inside srcdoc
    path = page.save(tmp_path / "p.html")
    assert open(path, encoding="utf-8").read() == page.html
    cli = tmp_path / "cli.html"
    assert (
        invoke(["view", "the cat sat on the mat", "--d", "16", "--heads", "2", "--causal", "--out", cli]).exit_code == 0
    )
    assert cli.read_text(encoding="utf-8") == page.html
    with pytest.raises(qkv.QkvError, match="html"):
        page.save(tmp_path / "p.txt")


def test_checkpoint_run_layer_heads_and_generation(tiny_llama, tmp_path):
    m = qkv.load(str(tiny_llama), dtype="float64")
    r = qkv.run("the cat sat on the mat", model=m)
    assert isinstance(r, qkv.ModelRun) and r.attentions.shape == (2, 4, 6, 6) and r.n_layers == 2
    assert r.tokens == ["the", "cat", "sat", "on", "the", "mat"] and list(r.ids) == [1, 2, 3, 4, 1, 5]
    first = r.layer(0)  # not kept by default (the last layer is): run again for it
    np.testing.assert_array_equal(first.weights, r.attentions[0])
    assert first.Q.shape == (4, 6, 4) and first.K.shape == (2, 6, 4) and first.layer_index == 0
    with pytest.raises(qkv.QkvError, match="does not exist"):
        r.layer(2)
    rows = qkv.heads(r)
    assert len(rows) == 8 and {"layer", "head", "role", "entropy"} <= set(rows[0])
    assert [row["layer"] for row in qkv.heads(r, layer=-1)] == [1] * 4
    cli = invoke(["run", "the cat sat on the mat", "--model", tiny_llama, "--format", "json", "--layer", "0"])
    assert cli.exit_code == 0, cli.output
    np.testing.assert_allclose(np.array(json.loads(cli.stdout)["attentions"]), r.attentions, atol=0)
    g = qkv.generate("the cat", model=m, max_new_tokens=3)
    assert isinstance(g, qkv.Generation) and g.prompt_len == 2 and len(g.steps()) == len(g.written_ids) <= 3
    gen_cli = invoke(["generate", "the cat", "--model", tiny_llama, "--dtype", "float64", "--max-new-tokens", "3",
                      "--format", "json"])  # fmt: skip
    assert gen_cli.exit_code == 0, gen_cli.output
    assert [s["id"] for s in g.steps()] == [s["id"] for s in json.loads(gen_cli.stdout)["steps"]]
    assert qkv.page(g).html.lstrip().lower().startswith("<!doctype html")
    assert qkv.heatmap(r, layer=[0, 1], heads=[0]) is not None
    with pytest.raises(qkv.QkvError, match="loaded in float64"):
        qkv.run("the cat", model=m, dtype="float32")
    with pytest.raises(qkv.QkvError, match="--heads cannot be used with --model"):
        qkv.run("the cat", model=m, heads=4)


def test_attribution_rows(tiny_llama):
    a = qkv.attribute("the cat sat on the mat", model=str(tiny_llama), method="rollout")
    assert isinstance(a, qkv.Attribution) and a.method == "rollout" and a.attribution.shape == (6, 6)
    np.testing.assert_allclose(a.attribution.sum(axis=1), 1.0, atol=1e-9)  # rollout rows stay distributions
    assert {"key", "token", "attribution"} <= set(a.received()[0])
