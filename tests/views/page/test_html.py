"""`qkv view` without a browser: the page's structure, no network, the size budget, the data decoded here (by a
decoder written from the format's description, not by the code under test) equal to the computed weights, and
hostile labels that stay text. tests/browser/ drives the same pages in Chromium."""

from __future__ import annotations

import base64
import hashlib
import json
import re
from dataclasses import replace
from html.parser import HTMLParser

import numpy as np
import pytest
from typer.testing import CliRunner

from qkv_cli.cli import app
from qkv_cli.core.result import GenerationResult, Kind
from qkv_cli.core.settings import Settings
from qkv_cli.errors import QkvError
from qkv_cli.pipeline import band as longdoc
from qkv_cli.pipeline.compute import compute
from qkv_cli.pipeline.request import Request
from qkv_cli.text.tokens import Tokens
from qkv_cli.views import kinds
from qkv_cli.views.page import html as page

TEXT = "The animal did not cross the street because it was too tired to walk."
HOSTILE = "</script><script>alert(1)</script>"
runner = CliRunner()


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


# --- an independent decoder of the format (html_data's docstring), as the page's JavaScript reads it ---------------


def raw(text: str) -> np.ndarray:
    return np.frombuffer(base64.b64decode(text), dtype=np.uint8)


def unpack12(text: str, count: int) -> np.ndarray:
    b = raw(text).reshape(-1, 3).astype(np.uint16)
    pairs = np.stack([(b[:, 0] << 4) | (b[:, 1] >> 4), ((b[:, 1] & 15) << 8) | b[:, 2]], axis=1)
    return pairs.ravel()[:count] / 4095.0


def decode_layer(entry: dict, shape, masked):
    """(weights, scores or None) of one layer, shape (tau, m, cols)."""
    scores = weights = None
    if "s" in entry:
        rel = np.frombuffer(base64.b64decode(entry["s"]), dtype="<f2").astype(np.float64).reshape(shape)
        top = np.frombuffer(base64.b64decode(entry["top"]), dtype="<f4").astype(np.float64).reshape(shape[:2])
        scores = rel + top[..., None]
        e = np.where(masked[None], 0.0, np.exp(np.where(masked[None], 0.0, rel)))
        total = e.sum(-1, keepdims=True)
        weights = np.divide(e, total, out=np.zeros_like(e), where=total > 0)
    if "w" in entry:
        weights = unpack12(entry["w"], int(np.prod(shape))).reshape(shape)
    return weights, scores


def data_of(html: str) -> dict:
    found = re.search(r'<script type="application/json" id="qkv-data">(.*?)</script>', html, re.S)
    return json.loads(found.group(1))


def decode(doc: dict, b: int = 0):
    """Sentence b: labels, and per layer (weights, scores, masked) as the page shows them."""
    s = doc["sentences"][b]
    m, n, tau = len(s["tokens"]), len(s["keys"]), doc["tau"]
    cols = doc["band"] or n
    grids = [np.unpackbits(raw(g), bitorder="little")[: m * n].reshape(m, n).astype(bool) for g in s["masks"]]
    layers = []
    for l, entry in enumerate(s["layers"]):
        masked = grids[s["maskOf"][l]] if grids else np.zeros((m, cols), dtype=bool)
        w, sc = decode_layer(entry, (tau, m, cols), masked)
        layers.append((w, sc, masked))
    return s, layers


def result_of(**kw):
    text = kw.pop("text", TEXT)
    return compute(Request.of(text=text, settings=Settings(**{"d": 32, "tau": 4, **kw.pop("settings", {})}), **kw))


CASES = {
    "no mask": {},
    "causal": {"settings": {"causal": True}},
    "window": {"settings": {"window": 3}},
    "gqa": {"settings": {"tau": 8, "kv_heads": 2, "causal": True}},
    "cross": {"context": "Le chat est assis sur le tapis rouge.", "settings": {"kv_heads": 2}},
    "float32 scale none": {"settings": {"dtype": "float32", "scale": "none"}},
    "ablate k": {"settings": {"ablate": "k"}},
    "bpe": {"settings": {"tokenizer": "bpe"}},
}


@pytest.mark.parametrize("case", CASES)
def test_dense_page_decodes_to_the_weights_scores_and_mask(case):
    r = result_of(**CASES[case])
    doc = data_of(kinds.render(r))
    s, [(w, scores, masked)] = decode(doc)
    assert doc["kind"] == "dense" and doc["L"] == 1 and doc["tau"] == r.tau
    assert s["tokens"] == r.labels and s["keys"] == r.key_labels
    assert np.abs(w - r.weights).max() <= 2e-3
    assert np.abs(w - r.weights).max() <= 1e-3  # the page keeps a margin
    np.testing.assert_array_equal(masked, r.masked)
    np.testing.assert_allclose(scores, r.scores, rtol=2e-3, atol=2e-3 * np.abs(r.scores).max())
    assert doc["kv"] == [j // (r.tau // r.G) for j in range(r.tau)] and doc["cross"] == r.is_cross


def test_weights_are_stored_when_the_scores_do_not_give_them(monkeypatch):
    """A layer whose Softmax(stored S + Mask) misses the computed weights stores the weights too."""
    r = result_of(settings={"causal": True})
    off = replace(r, weights=r.weights * 0.9)
    s, [(w, scores, _)] = decode(data_of(kinds.render(off)))
    assert "w" in s["layers"][0] and scores is not None
    assert np.abs(w - off.weights).max() <= 2e-3


def test_band_page(monkeypatch):
    monkeypatch.setattr(longdoc, "BAND_MIN_TOKENS", 8)
    r = result_of(settings={"window": 4}, band=True)
    assert r.kind == Kind.BAND
    doc = data_of(kinds.render(r))
    s, [(w, scores, masked)] = decode(doc)
    assert doc["band"] == 4 and scores is None and s["masks"] == []
    np.testing.assert_array_less(np.abs(w - r.band), 2e-3)


def test_batch_page_shows_each_sentence():
    r = compute(
        Request.of(text="the cat sat\na dog barked at the moon\nhi", batch=True, settings=Settings(d=16, tau=2))
    )
    doc = data_of(kinds.render(r))
    assert [len(s["tokens"]) for s in doc["sentences"]] == r.lengths
    assert "+3 pads" in doc["sentences"][0]["name"]
    for b, item in enumerate(r.items):
        s, [(w, _, masked)] = decode(doc, b)
        assert np.abs(w - item.weights).max() <= 2e-3
        np.testing.assert_array_equal(masked, item.masked)


@pytest.mark.reference
def test_model_page_every_layer_with_scores_where_kept(minilm):
    r = compute(Request.of(text=TEXT, model=str(minilm), layers=(0, -1)))
    doc = data_of(kinds.render(r))
    s, layers = decode(doc)
    assert doc["kind"] == "model" and doc["L"] == 6 and doc["tau"] == 12 and doc["detail"] == [0, 5]
    for l, (w, scores, masked) in enumerate(layers):
        assert np.abs(w - r.attentions[l]).max() <= 1e-3
        assert (scores is not None) == (l in (0, 5)) and not masked.any()
    np.testing.assert_allclose(layers[5][1], r.layers[5].scores, atol=0.02, rtol=2e-3)
    assert len(s["stats"]["rows"]) == 6 and len(s["stats"]["roles"][0]) == 12


@pytest.mark.reference
def test_decoder_page_with_grouped_heads(transformers, torch, tmp_path):
    from decoders import build

    build(transformers, torch, "gemma2", tmp_path)  # 4 query heads on 2 key/value heads, sliding layers, soft-cap
    r = compute(Request.of(text=TEXT, model=str(tmp_path)))
    doc = data_of(kinds.render(r))
    _, layers = decode(doc)
    assert doc["G"] == 2 and doc["kv"] == [0, 0, 1, 1]
    for l, (w, _, masked) in enumerate(layers):
        assert np.abs(w - r.attentions[l]).max() <= 1e-3
        np.testing.assert_array_equal(masked, r.layer_masked(l))


def test_page_is_self_contained_and_fetches_nothing():
    html = kinds.render(result_of())
    assert html.startswith("<!DOCTYPE html>")
    assert not re.search(r"https?:|//[a-z0-9]|\bsrc=|\bhref=|@import|url\(|fetch\(|XMLHttpRequest|WebSocket|"
                         r"EventSource|sendBeacon|import\(|<link|<iframe|<img|<object|<embed", html, re.I)  # fmt: skip
    tags = Tags()
    tags.feed(html)
    assert [t for t, _ in tags.found if t in ("script", "style")] == ["style", "script", "script"]
    csp = dict(tags.found)["meta-csp"]
    assert "default-src 'none'" in csp
    css, js = page.code()
    for text, where in ((js, "script-src"), (css, "style-src")):
        digest = base64.b64encode(hashlib.sha256(text.encode()).digest()).decode()
        assert f"{where} 'sha256-{digest}'" in csp  # the inline code as written, and nothing else, may run
        assert f">{text}</" in html


@pytest.mark.reference
def test_code_budget_and_bytes_per_weight(minilm):
    """At most 100 KB of code, and at most 3 bytes per weight: a MiniLM run on 128 tokens, and a random one."""
    css, js = page.code()
    code = len((page.asset("view.html") + css + js).encode())
    assert code <= 100_000
    words = ("the cat sat on the mat because it was warm and the dog slept by the door " * 12).split()
    r = compute(Request.of(text=" ".join(words[:126]), model=str(minilm)))
    weights = r.attentions.size
    assert r.attentions.shape == (6, 12, 128, 128)
    assert (len(kinds.render(r).encode()) - code) / weights <= 3.0
    r = result_of(text=" ".join(words[:120]), settings={"causal": True, "tau": 8, "d": 64})
    assert (len(kinds.render(r).encode()) - code) / r.weights.size <= 3.0


def hostile_result():
    r = result_of(text="a b c d", context="x y z")
    strings = (HOSTILE, "\x1b[2J", "bell\x07", "\u202eevil")
    tokens = Tokens(strings=strings, labels=strings, offsets=((0, 0),) * 4)
    keys = Tokens(strings=("<!--", "]]>", "&amp;"), labels=("<!--", "]]>", "&amp;"), offsets=((0, 0),) * 3)
    return replace(r, tokens=tokens, context=keys)


def test_hostile_labels_stay_text():
    html = kinds.render(hostile_result())
    assert html.count("<script") == 2 and html.count("</script") == 2  # no label opened or closed an element
    assert HOSTILE not in html and "<script>alert" not in html  # only inside the JSON, as \\u003c escapes
    assert "<!--" not in html and "\x1b" not in html and "\x07" not in html
    doc = data_of(html)
    s = doc["sentences"][0]
    assert s["tokens"] == [HOSTILE, "[2J", "bell", "\u202eevil"] and s["keys"] == ["<!--", "]]>", "&amp;"]
    js = page.code()[1]
    for unsafe in (".innerHTML", ".outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function"):
        assert unsafe not in js


@pytest.mark.reference
def test_hostile_model_name_in_the_title(minilm):
    r = compute(Request.of(text="a cat", model=str(minilm)))
    r.model.name = "<b>bold</b>\x1b[31m"
    html = kinds.render(r)
    assert "<title>&lt;b&gt;bold&lt;/b&gt;[31m: attention</title>" in html and "<b>" not in html


class Tags(HTMLParser):
    def __init__(self):
        super().__init__()
        self.found = []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "meta" and attrs.get("http-equiv") == "Content-Security-Policy":
            self.found.append(("meta-csp", attrs["content"]))
        self.found.append((tag, attrs))


def test_view_cli_writes_the_page(tmp_path):
    out = tmp_path / "a.html"
    r = invoke("view", "the cat sat", "--d", "16", "--heads", "2", "--causal", "--out", out)
    assert r.exit_code == 0, r.output
    assert f"wrote {out}" in r.output and data_of(out.read_text())["sentences"][0]["tokens"] == ["the", "cat", "sat"]


@pytest.mark.parametrize(
    "args, message",
    [
        (["--d", "10", "--heads", "3"], "divisible"),
        (["--out", "page.png"], "extension must be one of .html, .htm"),
        (["--batch", "--context", "x y"], "--batch cannot be combined with --context"),
        (["--model", "no/such/model/here"], "no/such/model/here"),
        (["--layer", "1"], "--layer needs --model"),
    ],
)
def test_view_cli_refuses_bad_input_before_writing(tmp_path, monkeypatch, args, message):
    monkeypatch.chdir(tmp_path)
    r = invoke("view", "the cat sat", *args)
    assert r.exit_code == 2 and message in r.output and r.output.count("\n") == 1
    assert list(tmp_path.iterdir()) == []


def test_failed_write_keeps_the_old_page(tmp_path, monkeypatch):
    out = tmp_path / "a.html"
    out.write_text("old page")

    def broken(doc):
        raise QkvError("boom while rendering")

    monkeypatch.setattr(page, "render_doc", broken)
    r = invoke("view", "the cat sat", "--d", "16", "--heads", "2", "--out", out)
    assert r.exit_code == 2 and out.read_text() == "old page" and sorted(tmp_path.iterdir()) == [out]


def test_open_uses_the_web_browser(tmp_path, monkeypatch):
    import webbrowser

    opened = []
    monkeypatch.setattr(webbrowser, "open", opened.append)
    out = tmp_path / "a b.html"
    assert invoke("view", "hi there", "--d", "8", "--heads", "2", "--out", out, "--open").exit_code == 0
    assert opened == [out.resolve().as_uri()] and opened[0].startswith("file://")


def test_a_kind_without_a_page_is_refused_clearly(monkeypatch):
    monkeypatch.setitem(kinds.KINDS, Kind.GENERATION, replace(kinds.KINDS[Kind.GENERATION], page=None))
    with pytest.raises(QkvError, match="qkv view cannot show a generation run: it shows dense"):
        kinds.page_data(GenerationResult(tokens=result_of().tokens))
