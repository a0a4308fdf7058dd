"""`qkv view` pages in a real browser (Debian's Chromium through Playwright): nothing fetched, no console error,
every weight the page shows equal to the NPZ of the same run, hovering and clicking change the picture, select()
does what a click does, the keyboard works, light and dark themes, hostile labels stay text."""

from __future__ import annotations

import os
import shutil

import numpy as np
import pytest
from browser.pictures import blank, changed

pytestmark = pytest.mark.browser

TEXT = "The animal did not cross the street because it was too tired."
SMALL = ["--d", "32", "--heads", "4"]
TOL = 2e-3


def assert_close(shown, expected):
    assert shown.shape == expected.shape
    assert np.abs(shown - expected).max() <= TOL


CASES = {
    "no mask": [TEXT, *SMALL],
    "causal": [TEXT, *SMALL, "--causal"],
    "window": [TEXT, *SMALL, "--window", "3"],
    "grouped-query": [TEXT, "--d", "64", "--heads", "8", "--kv-heads", "2", "--causal"],
    "cross-attention": [TEXT, *SMALL, "--context", "Le chat est assis sur le tapis rouge.", "--kv-heads", "2"],
    "any script": ["مرحبا بالعالم 你好 世界 🙂 Ünïcödé текст", *SMALL],
}


@pytest.mark.parametrize("case", CASES)
def test_every_weight_equals_the_npz(pages, viewer, case):
    html, z = pages(*CASES[case])
    v = viewer(html)
    assert v.js("window.qkvView.tokens") == list(z["tokens"])
    if "context_tokens" in z:
        assert v.js("window.qkvView.keyTokens") == list(z["context_tokens"])
    assert_close(v.weights()[0], z["weights"])
    v.clean()


def test_browsers_without_uint8array_frombase64_decode_the_same(pages, viewer):
    """Uint8Array.fromBase64 is recent (Chromium 140, Firefox 133, Safari 18.2): without it the page uses atob."""
    html, z = pages(TEXT, *SMALL, "--causal")
    old = viewer(html, init="delete Uint8Array.fromBase64")
    assert old.js("typeof Uint8Array.fromBase64") == "undefined"
    assert_close(old.weights()[0], z["weights"])
    old.clean()


def test_band_of_a_long_document(pages, viewer, monkeypatch):
    from qkv_cli.pipeline import band

    monkeypatch.setattr(band, "BAND_MIN_TOKENS", 16)
    html, z = pages(" ".join(f"w{k % 7}" for k in range(40)), *SMALL, "--window", "5")
    v = viewer(html)
    band_weights = z["weights_band"]  # (tau, m, n_c): query i on key i - n_c + 1 + t
    tau, m, n_c = band_weights.shape
    shown = v.weights()[0]
    assert shown.shape == (tau, m, m)
    for i in range(m):
        for t in range(n_c):
            j = i - n_c + 1 + t
            if j >= 0:
                assert abs(shown[:, i, j] - band_weights[:, i, t]).max() <= TOL
    i, j = np.indices((m, m))
    assert not shown[:, (j > i) | (i - j >= n_c)].any()  # outside the window: 0
    v.js("window.qkvView.select({view: 'matrix', query: 30})")
    assert not blank(v.shot("#mx"))
    v.clean()


def test_each_sentence_of_a_padded_batch(pages, viewer, tmp_path):
    lines = tmp_path / "lines.txt"
    lines.write_text("the cat sat\na dog barked at the moon all night\nhello\n")
    html, z = pages("--file", lines, *SMALL, "--batch")
    v = viewer(html)
    assert v.js("window.qkvView.sentences") == 3
    for b, m in enumerate(z["lengths"]):
        v.js(f"window.qkvView.select({{sentence: {b}}})")
        assert v.js("window.qkvView.tokens") == list(z["tokens"][b][:m])
        assert_close(v.weights()[0], z["weights"][b][:, :m, :m])
    v.clean()


@pytest.fixture
def dense(pages):
    return pages(TEXT, *SMALL, "--causal")[0]


def test_the_head_view_is_drawn_and_hovering_a_token_changes_it(viewer, dense):
    v = viewer(dense)
    before = v.shot("#view-head")
    assert not blank(before)
    v.page.hover('#hv-q .tok[data-i="3"]')
    hovered = v.shot("#view-head")
    assert changed(hovered, before) > 500
    assert v.js("window.qkvView.state().lock") is None
    v.page.mouse.move(1, 1)  # leaving the tokens gives back every line
    assert changed(v.shot("#view-head"), before) == 0
    v.page.hover('#hv-k .tok[data-i="2"]')
    column = v.shot("#view-head")
    assert changed(column, before) > 500 and changed(column, hovered) > 500
    v.clean()


def test_select_does_what_a_click_does(viewer, dense):
    a, b = viewer(dense), viewer(dense)
    a.page.click('.hbtn[data-h="2"]')
    a.page.click('#hv-q .tok[data-i="4"]')
    a.page.mouse.move(1, 1)
    b.js("window.qkvView.select({head: 2, query: 4})")
    assert a.js("window.qkvView.state()") == b.js("window.qkvView.state()")
    assert a.js("window.qkvView.state()")["lock"] == {"side": "q", "i": 4}
    assert changed(a.shot("main"), b.shot("main")) == 0
    a.page.click("#tab-model")
    a.page.click('.thumb[data-l="0"][data-h="3"]')
    b.js("window.qkvView.select({layer: 0, head: 3, view: 'head'})")
    assert a.js("window.qkvView.state()") == b.js("window.qkvView.state()")
    a.page.mouse.move(1, 1)
    assert changed(a.shot("main"), b.shot("main")) == 0
    a.clean()
    b.clean()


def test_matrix_view_tooltip_and_arrow_keys(viewer, dense):
    v = viewer(dense)
    v.page.click("#tab-matrix")
    assert not blank(v.shot("#mx"))
    v.page.focus("#mx")
    for key in ("ArrowDown", "ArrowDown", "ArrowDown", "ArrowLeft", "ArrowRight", "ArrowRight"):
        v.page.keyboard.press(key)
    state = v.js("window.qkvView.state()")
    assert state["cell"] == {"i": 3, "t": 2} and state["lock"] == {"side": "q", "i": 3}
    tip = v.page.inner_text("#tip")
    weight = v.js("window.qkvView.weight(0, 0, 3, 2)")
    assert "query 3: not" in tip and "key 2: did" in tip and f"weight {weight:.4f}" in tip
    assert "score" in tip and "mask 0" in tip
    v.page.keyboard.press("ArrowRight")
    v.page.keyboard.press("ArrowRight")  # key 4 is after query 3: removed by the causal mask
    assert "mask \u2212\u221e" in v.page.inner_text("#tip") and "weight 0.0000" in v.page.inner_text("#tip")
    box = v.page.locator("#mx").bounding_box()
    v.page.mouse.move(box["x"] + box["width"] - 5, box["y"] + box["height"] - 5)  # the last cell, by pointing
    m = v.js("window.qkvView.shape")[2]
    assert f"query {m - 1}: ." in v.page.inner_text("#tip")
    v.clean()


def test_keyboard_moves_along_the_tokens_and_picks_one(viewer, dense):
    v = viewer(dense)
    before = v.shot("#view-head")
    v.page.focus('#hv-q .tok[data-i="0"]')
    v.page.keyboard.press("ArrowDown")
    assert v.js("document.activeElement.dataset.i") == "1" and changed(v.shot("#view-head"), before) > 500
    v.page.keyboard.press("Enter")
    assert v.js("window.qkvView.state().lock") == {"side": "q", "i": 1}
    v.page.keyboard.press("Escape")
    assert v.js("window.qkvView.state().lock") is None
    v.page.keyboard.press("]")  # one layer only: stays; '.' picks the next head
    v.page.keyboard.press(".")
    assert v.js("window.qkvView.state().heads") == [1]
    v.page.keyboard.press("3")
    assert v.js("window.qkvView.state().view") == "matrix"
    v.clean()


def test_light_and_dark_follow_the_system(viewer, dense):
    light, dark = viewer(dense, scheme="light"), viewer(dense, scheme="dark")
    lum = "(() => { const c = getComputedStyle(document.body).backgroundColor.match(/\\d+/g).map(Number); " \
          "return (c[0] + c[1] + c[2]) / 765; })()"  # fmt: skip
    assert light.js(lum) > 0.8 and dark.js(lum) < 0.2
    assert not blank(dark.shot("#view-head"))
    light.clean()
    dark.clean()


def test_hostile_labels_are_text(viewer, tmp_path):
    from dataclasses import replace

    from qkv_cli.core.settings import Settings
    from qkv_cli.pipeline.compute import compute
    from qkv_cli.pipeline.request import Request
    from qkv_cli.text.tokens import Tokens
    from qkv_cli.views.kinds import save_page

    hostile = ("</script><script>alert(1)</script>", "<img src=x onerror=alert(2)>", "\x1b[2J", "&lt;b&gt;")
    r = compute(Request.of(text="a b c d", settings=Settings(d=16, tau=2)))
    r = replace(r, tokens=Tokens(strings=hostile, labels=hostile, offsets=((0, 0),) * 4))
    save_page(r, tmp_path / "hostile.html")
    v = viewer(tmp_path / "hostile.html")
    assert v.js("[...document.querySelectorAll('#hv-q .tok')].map(e => e.textContent)") == [
        hostile[0], hostile[1], "[2J", "&lt;b&gt;"]  # fmt: skip
    assert v.js("document.querySelectorAll('img, script').length") == 2  # the data and the code
    v.js("window.qkvView.select({view: 'matrix'})")
    v.js("window.qkvView.select({view: 'model'})")
    v.clean()


@pytest.mark.reference
def test_minilm_checkpoint_page(pages, viewer, minilm, tmp_path):
    html, z = pages(TEXT, "--model", minilm)
    v = viewer(html, width=1000, height=900)
    assert v.js("window.qkvView.shape") == [6, 12, len(z["tokens"]), len(z["tokens"])]
    assert_close(v.weights(), z["attentions"])
    assert v.js("window.qkvView.score(5, 0, 1, 2)") == pytest.approx(float(z["scores"][0, 1, 2]), abs=0.02)
    assert v.js("window.qkvView.score(0, 0, 1, 2)") is None  # only the last layer was kept in detail
    v.page.click("#tab-model")
    assert v.page.locator(".thumb").count() == 72
    assert not blank(v.shot("#grid"))
    v.page.click('.thumb[data-l="2"][data-h="5"]')
    assert v.js("window.qkvView.state()")["layer"] == 2 and v.js("window.qkvView.state()")["view"] == "head"
    v.js("window.qkvView.select({layer: 3, head: [1, 7, 9], query: null})")
    v.page.hover('#hv-q .tok[data-i="9"]')  # "it": layer 3, head 1 looks at "animal"
    assert v.js("window.qkvView.weight(3, 1, 9, 2)") > 0.5
    box = v.page.locator("#view-head").bounding_box()
    v.js("window.scrollTo(0, 0)")
    picture = v.page.screenshot(
        full_page=True, clip={"x": 0, "y": 0, "width": 1000, "height": box["y"] + box["height"] + 8}
    )
    assert not blank(picture)
    (tmp_path / "view.png").write_bytes(picture)
    if os.environ.get("QKV_SCREENSHOT"):  # QKV_SCREENSHOT=docs/view.png keeps this picture for the README
        shutil.copy(tmp_path / "view.png", os.environ["QKV_SCREENSHOT"])
    v.clean()


@pytest.mark.reference
def test_tiny_random_decoder_page(pages, viewer, transformers, torch, tmp_path):
    from decoders import build

    build(transformers, torch, "llama", tmp_path / "llama")  # 4 query heads reading 2 key/value heads, causal
    html, z = pages(TEXT, "--model", tmp_path / "llama", "--layer", "0")
    v = viewer(html)
    assert_close(v.weights(), z["attentions"])
    assert v.page.inner_text('.hbtn[data-h="3"]') == "3\u21921"
    v.page.click("#tab-matrix")
    v.page.focus("#mx")
    v.page.keyboard.press("ArrowRight")  # query 0 on key 1: after it, masked
    assert "mask \u2212\u221e" in v.page.inner_text("#tip") and "reads key/value head 0" in v.page.inner_text("#tip")
    v.clean()


def test_a_compact_page_shows_the_run_within_its_storage(pages, viewer, monkeypatch):
    """A large page (here: every page, the limit lowered) stores 8-bit row shares, deflated: each shown weight is
    within 1% of its row's largest (under 1% of it: 0), the detail layer's weights and scores stay exact, and the
    scores of masked cells are said not to be stored."""
    from helpers import smollm2_gguf

    from qkv_cli.views.page import data as html_data

    monkeypatch.setattr(html_data, "COMPACT_CELLS", 0)
    html, z = pages("The cat sat on the mat because it was tired.", "--model", smollm2_gguf(), "--dtype", "float32")
    assert '"z:' in html.read_text()
    v = viewer(html)
    shown, A = v.weights(), z["attentions"]
    L, _, m, _ = A.shape
    top = A.max(axis=-1, keepdims=True)
    assert np.all(np.abs(shown[:-1] - A[:-1]) <= 0.0099 * top[:-1] + 1e-6)
    assert not shown[:-1][A[:-1] < 0.009 * top[:-1]].any()  # invisible weights are stored as 0
    assert np.abs(shown[:-1] - A[:-1]).max() > 1e-4  # (coarser than 12 bits: the compact storage was used)
    assert_close(shown[-1], A[-1])  # the detail layer: from its scores
    assert v.js(f"window.qkvView.score({L - 1}, 0, 3, 1)") == pytest.approx(float(z["scores"][0, 3, 1]), abs=0.02)
    assert v.js(f"window.qkvView.score({L - 1}, 0, 1, 3)") is None  # masked: not stored
    v.js(f"window.qkvView.select({{view: 'matrix', layer: {L - 1}, head: 0, query: 1}})")
    v.page.focus("#mx")
    v.page.keyboard.press("ArrowRight")
    v.page.keyboard.press("ArrowRight")  # query 1 on key 2: after it, masked
    assert "score: not stored" in v.page.inner_text("#tip")
    v.js("window.qkvView.select({view: 'matrix', layer: 0, head: 0, query: 2})")
    v.page.focus("#mx")
    v.page.keyboard.press("ArrowLeft")
    assert "weight \u2248" in v.page.inner_text("#tip")
    v.clean()
