"""`qkv view SOURCE --model BART --target TEXT` in Chromium: the page holds the encoder's, the decoder's and the
cross-attention, with a switch between them; each one's weights (through window.qkvView) equal the NPZ of `qkv run`
with the same options, and the head buttons and layers follow the attention shown (this tiny BART has 4 encoder
heads and 2 decoder heads). Nothing fetched, no console error."""

from __future__ import annotations

import numpy as np
import pytest
from browser.pictures import blank
from encdecs import build

pytestmark = [pytest.mark.browser, pytest.mark.reference]
SOURCE, TARGET = "the cat sat on the mat", "le chat est assis"
TOL = 2e-3


@pytest.fixture(scope="module")
def bart(tmp_path_factory):
    from helpers import reference_import

    torch, transformers = reference_import("torch"), reference_import("transformers")
    folder = tmp_path_factory.mktemp("bart")
    build(transformers, torch, "bart", folder)
    return folder


@pytest.mark.parametrize("first", ["cross", "encoder"])
def test_the_three_attentions_behind_one_switch(first, bart, pages, viewer):
    html, z = pages(SOURCE, "--model", bart, "--target", TARGET, "--attention", first)
    v = viewer(html)
    order = ["encoder", "decoder", "cross"]
    assert v.js("window.qkvView.sentences") == 3 and v.js("window.qkvView.state().sentence") == order.index(first)
    assert v.page.locator("#sentence-box").is_visible() and v.js("document.getElementById('sentence-label')"
                                                                ".textContent") == "Attention"  # fmt: skip
    source, target = list(z["source_labels"]), list(z["decoder_labels"])
    for b, attention in enumerate(order):
        v.js(f"window.qkvView.select({{sentence: {b}}})")
        want = z[f"{attention}_attentions"]  # (L, tau, m, n)
        L, tau, m, n = want.shape
        assert v.js("window.qkvView.shape") == [L, tau, m, n]
        assert v.js("window.qkvView.tokens") == (source if attention == "encoder" else target)
        assert v.js("window.qkvView.keyTokens") == (target if attention == "decoder" else source)
        assert np.abs(v.weights() - want).max() <= TOL
        assert v.page.locator(".hbtn").count() == tau and v.js("window.qkvView.state().heads") == list(range(tau))
        masked = v.js("(m) => { const out = []; for (let i = 0; i < m[0]; i++) for (let j = 0; j < m[1]; j++) "
                      "out.push(window.qkvView.masked(0, i, j)); return out; }", [m, n])  # fmt: skip
        causal = np.triu(np.ones((m, n), bool), 1) if attention == "decoder" else np.zeros((m, n), bool)
        np.testing.assert_array_equal(np.array(masked).reshape(m, n), causal)
        for view in ("head", "model", "matrix"):
            v.js(f"window.qkvView.select({{view: '{view}', layer: {L - 1}, head: {tau - 1}}})")
            assert not blank(v.shot(f"#view-{view}"))
    assert z["encoder_attentions"].shape[1] != z["decoder_attentions"].shape[1]  # the heads did change
    v.clean()


def test_a_writing_shows_each_token_over_the_source(bart, page_and_npz, viewer):
    html, z = page_and_npz([SOURCE, "--model", bart, "--generate", 3], ["generate", SOURCE, "--model", bart,
                           "--max-new-tokens", 3])  # fmt: skip
    A = z["cross_attentions"]  # (steps, L_dec, tau_dec, n): each written token's cross-attention row
    steps, L, tau, n = A.shape
    v = viewer(html)
    assert v.js("window.qkvView.shape") == [L, tau, steps, n]
    assert v.js("window.qkvView.keyTokens") == list(z["source_tokens"])
    assert v.js("window.qkvView.tokens") == list(z["tokens"])
    assert np.abs(v.weights() - A.transpose(1, 2, 0, 3)).max() <= TOL
    assert not v.js(f"window.qkvView.masked(0, 0, {n - 1})")  # the whole source is read from the first step
    assert v.page.locator(".hbtn").count() == tau
    v.clean()
