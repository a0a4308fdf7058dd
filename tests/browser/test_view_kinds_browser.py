"""`qkv view --generate` and `qkv view --method` in Chromium: every weight (and every attribution value) the page
gives through window.qkvView equal to the NPZ of `qkv generate` / `qkv attribute` with the same options, the masked
cells where a step had not read yet, the attribution's head button, tooltip and thumbnail, nothing fetched, no
console error. A tiny NumPy-made GPT-2 (support/tiny.py), a tiny random grouped-head Llama (support/decoders.py)."""

from __future__ import annotations

import numpy as np
import pytest
from browser.pictures import blank, changed
from tiny import make_checkpoint

pytestmark = pytest.mark.browser

PROMPT = "the cat sat"
TEXT = "the cat sat on the mat"
TOL = 2e-3


@pytest.fixture(scope="module")
def gpt(tmp_path_factory):
    return make_checkpoint(tmp_path_factory.mktemp("tiny") / "gpt2", "gpt2")


def masked_cells(v) -> np.ndarray:
    """window.qkvView.masked for every cell, (L, m, n)."""
    flat = v.js("""() => { const v = window.qkvView, [L, , m, n] = v.shape, out = [];
        for (let l = 0; l < L; l++) for (let i = 0; i < m; i++) for (let j = 0; j < n; j++) out.push(v.masked(l, i, j));
        return out; }""")
    L, _, m, n = v.js("window.qkvView.shape")
    return np.array(flat).reshape(L, m, n)


def attributions(v) -> np.ndarray:
    flat = v.js("""() => { const v = window.qkvView, [, , m, n] = v.shape, out = [];
        for (let i = 0; i < m; i++) for (let j = 0; j < n; j++) out.push(v.attribution(i, j));
        return out; }""")
    return np.array(flat).reshape(v.js("window.qkvView.shape")[2:])


@pytest.mark.parametrize("sampling", [[], ["--temperature", "1.5", "--top-k", "4", "--seed", "3"]])
def test_generation_page_weights_equal_the_npz(page_and_npz, viewer, gpt, sampling):
    options = ["--model", gpt, "--dtype", "float32", *sampling]
    html, z = page_and_npz([PROMPT, "--generate", 5, *options], ["generate", PROMPT, "--max-new-tokens", 5, *options])
    A, P = z["step_attentions"], int(z["prompt_len"])  # (steps, L, tau, n_max)
    steps, L, tau, n = A.shape
    v = viewer(html)
    assert v.js("window.qkvView.kind") == "generation" and v.js("window.qkvView.shape") == [L, tau, steps, n]
    assert v.js("window.qkvView.tokens") == list(z["tokens"][P:]) and v.js("window.qkvView.keyTokens") == list(
        z["tokens"][:n]
    )
    shown = v.weights()
    assert np.abs(shown - A.transpose(1, 2, 0, 3)).max() <= TOL
    later = np.arange(n)[None, :] >= P + np.arange(steps)[:, None]  # keys step t had not read
    np.testing.assert_array_equal(masked_cells(v), np.broadcast_to(later, (L, steps, n)))
    assert not shown[:, :, later].any()
    assert v.js("window.qkvView.state().layer") == L - 1 and v.js("window.qkvView.score(0, 0, 0, 0)") is None
    assert v.js("window.qkvView.attribution") is None and v.js("window.qkvView.method") is None
    assert not blank(v.shot("#view-head"))
    v.js("window.qkvView.select({view: 'matrix', layer: 0, head: 1})")
    v.page.focus("#mx")
    v.page.keyboard.press("End")  # row 0, the last key: written later, so masked
    tip = v.page.inner_text("#tip")
    assert f"wrote position {P}" in tip and "mask \u2212\u221e" in tip and "not kept (a generation" in tip
    v.js("window.qkvView.select({view: 'model'})")
    assert v.page.locator(".thumb").count() == L * tau and not blank(v.shot("#grid"))
    v.clean()


@pytest.mark.reference
def test_generation_of_a_tiny_llama_with_grouped_heads(page_and_npz, viewer, transformers, torch, tmp_path):
    from decoders import build

    build(transformers, torch, "llama", tmp_path / "llama")  # 3 layers, 4 query heads reading 2 key/value heads
    options = ["--model", tmp_path / "llama", "--dtype", "float32"]
    html, z = page_and_npz(["the animal was tired", "--generate", 4, "--layer", 0, *options],
                           ["generate", "the animal was tired", "--max-new-tokens", 4, *options])  # fmt: skip
    v = viewer(html)
    assert np.abs(v.weights() - z["step_attentions"].transpose(1, 2, 0, 3)).max() <= TOL
    assert v.page.inner_text('.hbtn[data-h="3"]') == "3\u21921" and v.js("window.qkvView.state().layer") == 0
    v.clean()


METHODS = {
    "rollout": ["--method", "rollout", "--head-fusion", "max"],
    "value-norm": ["--method", "value-norm"],
    "value-zeroing": ["--method", "value-zeroing", "--layer", "0"],
}


@pytest.mark.parametrize("method", METHODS)
def test_attribution_page_equals_the_npz(page_and_npz, viewer, gpt, method):
    options = ["--model", gpt, *METHODS[method]]
    html, z = page_and_npz([TEXT, *options], ["attribute", TEXT, *options])
    v = viewer(html)
    tau, m, n = z["weights"].shape
    assert v.js("window.qkvView.kind") == "attribution" and v.js("window.qkvView.method") == method
    assert v.js("window.qkvView.shape") == [1, tau, m, n]
    assert np.abs(v.weights()[0] - z["weights"]).max() <= TOL  # weight(): the raw weights of the real layer
    np.testing.assert_allclose(attributions(v), z["attribution"], rtol=1e-6, atol=1e-7 * np.abs(z["attribution"]).max())
    with pytest.raises(Exception, match="head 4 does not exist"):
        v.js(f"window.qkvView.weight(0, {tau}, 0, 0)")  # the attribution is not a head of weight()
    before = v.shot("#view-head")
    v.page.click(".hbtn.attr")  # the labelled button after the heads: the attribution alone
    assert v.js("window.qkvView.state()")["heads"] == ["attribution"]
    assert changed(v.shot("#view-head"), before) > 200
    v.page.click('.hbtn[data-h="1"]', modifiers=["Shift"])  # beside head 1
    assert v.js("window.qkvView.state()")["heads"] == [1, "attribution"]
    assert v.js("window.qkvView.select({head: ['attribution', 2]})")["heads"] == [2, "attribution"]
    v.js("window.qkvView.select({view: 'matrix', head: 'attribution', query: 3})")
    v.page.focus("#mx")
    v.page.keyboard.press("ArrowRight")
    tip = v.page.inner_text("#tip")
    i, j = v.js("window.qkvView.state().cell.i"), v.js("window.qkvView.state().cell.t")
    share = z["attribution"][i, j] / z["attribution"][i].sum()
    assert f"row share {share:.4f}" in tip and f"{z['attribution'][i, j]:.4f}" in tip and "not a head" in tip
    v.js("window.qkvView.select({view: 'model'})")
    assert v.page.locator(".thumb").count() == tau + 1 and not blank(v.shot("#grid"))
    v.page.click(f'.thumb[data-h="{tau}"]')
    assert v.js("window.qkvView.state()")["heads"] == ["attribution"]
    v.clean()


def test_value_norm_of_cross_attention_on_random_weights(page_and_npz, viewer):
    options = ["--method", "value-norm", "--d", "16", "--heads", "4", "--context", "le chat est assis"]
    html, z = page_and_npz([TEXT, *options], ["attribute", TEXT, *options])
    v = viewer(html, scheme="dark")
    assert v.js("window.qkvView.keyTokens") == list(z["context_tokens"])
    assert np.abs(v.weights()[0] - z["weights"]).max() <= TOL
    np.testing.assert_allclose(attributions(v), z["attribution"], rtol=1e-6)
    v.js("window.qkvView.select({head: 'attribution', query: 2})")
    assert not blank(v.shot("#view-head"))
    v.clean()
