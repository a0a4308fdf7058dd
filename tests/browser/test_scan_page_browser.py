"""The page of `qkv scan --page`: clicking a head lists its top texts (summary.json's), and the attention drawn for
a text is that head's weights on it from a separate qkv.run (3 decimals); nothing fetched, no console error."""

from __future__ import annotations

import numpy as np
import pytest
from pages import open_page
from scanning import SENTENCES, corpus_file, require
from tiny import make_checkpoint

pytestmark = pytest.mark.browser


def test_a_head_shows_its_top_texts_and_their_attention(browser, tmp_path):
    require("pyarrow")
    import qkv_cli as qkv

    model = make_checkpoint(tmp_path / "gpt2", "gpt2")
    s = qkv.scan(corpus_file(tmp_path, SENTENCES), model=str(model), out=tmp_path / "scan")
    path = tmp_path / "scan.html"
    s.page("previous").save(path)
    page, errors, requests = open_page(browser, path)
    assert len(page.query_selector_all("#grid td")) == 2 * 4
    page.click("#grid tr:nth-child(3) td:nth-child(3)")  # layer 1, head 1
    top = s.summary["scores"]["previous"]["top"][1][1]
    items = page.query_selector_all("#tops li")
    assert [f"(text {t})" in li.inner_text() for (t, _), li in zip(top, items, strict=True)] == [True] * len(top)
    items[1].click()
    cells = page.eval_on_selector_all("#att td", "cs => cs.map(c => Number(c.title.split(': ').pop()))")
    want = qkv.run(SENTENCES[top[1][0]], model=str(model)).attentions[1, 1]
    np.testing.assert_allclose(np.reshape(cells, want.shape), want, atol=5e-4)
    assert not errors and requests == [path.resolve().as_uri()]
