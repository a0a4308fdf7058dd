"""The Python API on tiny encoder-decoders (T5, BART) saved by transformers: ``qkv.run(source, model=..., target=...,
attention=...)`` holds the three attentions under transformers' names and equals transformers' eager attention;
``qkv.generate`` writes what transformers' generate writes and aligns each written token with the source; the
figure, the page and the head rows take these results, and refuse what does not apply in one line."""

from __future__ import annotations

import numpy as np
import pytest
from encdecs import build

import qkv_cli as qkv

pytestmark = pytest.mark.reference
SOURCE, TARGET = "the cat sat on the mat", "le chat est assis"


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    from helpers import reference_import

    torch, transformers = reference_import("torch"), reference_import("transformers")
    out = {}
    for name in ("t5", "bart"):
        folder = tmp_path_factory.mktemp(name)
        out[name] = (folder, build(transformers, torch, name, folder))
    return out


@pytest.mark.parametrize("name", ["t5", "bart"])
def test_run_holds_the_three_attentions_of_transformers(name, built, torch):
    from matplotlib.figure import Figure

    folder, model = built[name]
    r = qkv.run(SOURCE, model=str(folder), target=TARGET)
    with torch.no_grad():
        out = model(input_ids=torch.tensor([list(r.ids)]), decoder_input_ids=torch.tensor([r.decoder_ids]),
                    output_attentions=True)  # fmt: skip
    for key in ("encoder_attentions", "decoder_attentions", "cross_attentions"):
        np.testing.assert_allclose(getattr(r, key), np.stack([a[0].numpy() for a in getattr(out, key)]), atol=1e-5)
    np.testing.assert_array_equal(r.attentions, r.cross_attentions)  # the default: cross
    assert r.tokens[0] == r.result.encdec["decoder_labels"][0] and len(r.tokens) == len(r.decoder_ids)
    enc = qkv.run(SOURCE, model=str(folder), target=TARGET, attention="encoder")
    np.testing.assert_allclose(enc.layer(0).weights, out.encoder_attentions[0][0].numpy(), atol=1e-5)
    assert isinstance(qkv.heatmap(r), Figure) and isinstance(qkv.heatmap(r, layer=0), Figure)
    doc = qkv.page(r).html
    assert doc.lstrip().lower().startswith("<!doctype html") and "Attention" in doc


def test_generate_aligns_each_written_token_with_the_source(built, torch):
    from qkv_cli.views.kinds import page_data

    folder, model = built["bart"]
    g = qkv.generate(SOURCE, model=str(folder), max_new_tokens=4)
    source = qkv.run(SOURCE, model=str(folder), attention="encoder").tokens
    with torch.no_grad():
        want = model.generate(torch.tensor([list(g.ids)]), max_new_tokens=4, do_sample=False, num_beams=1,
                              use_cache=False)[0].tolist()  # fmt: skip
    assert list(g.written_ids) == want[1:]
    rows = g.step_attentions[:, -1].mean(axis=1)  # (steps, n): the last decoder layer, mean over heads
    for t, step in enumerate(g.steps()):
        assert step["id"] == want[1 + t] and step["read"][0]["at"] == int(np.argmax(rows[t]))
        assert step["read"][0]["token"] == source[int(np.argmax(rows[t]))]
    doc = page_data(g.result, kv_heads=None)
    assert doc["sentences"][0]["keys"] == source and doc["G"] == doc["tau"] == model.config.decoder_attention_heads
    assert qkv.page(g, layer=-1).html.lstrip().lower().startswith("<!doctype html")


def test_what_does_not_apply_is_one_line(built):
    folder, _ = built["t5"]
    cross = qkv.run(SOURCE, model=str(folder), target=TARGET)
    for call, fragment in [
        (lambda: qkv.heads(cross), "self-attention"),
        (lambda: qkv.run(SOURCE, model=str(folder), attention="sideways"), "sideways"),
        (lambda: qkv.run(SOURCE, target=TARGET), "--target needs --model"),
        (lambda: qkv.run(SOURCE, model=str(folder), target=" ".join(["cat"] * 600)), "at most 512"),
        (lambda: qkv.attribute(SOURCE, model=str(folder), method="rollout"), "rollout"),
    ]:
        with pytest.raises(qkv.QkvError, match=fragment) as info:
            call()
        assert "\n" not in str(info.value)
    rows = qkv.heads(qkv.run(SOURCE, model=str(folder), target=TARGET, attention="decoder"))
    assert len(rows) == 3 * 4 and {"previous", "role"} <= set(rows[0])
    with pytest.raises(AttributeError, match="encoder-decoders have"):
        qkv.run("the cat", d=8, heads=2).result and qkv.run(SOURCE, model=str(folder), attention="encoder").nothing
