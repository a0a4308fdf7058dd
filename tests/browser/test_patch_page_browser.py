"""The page of `qkv patch --page` in Chromium: the recovery grids are drawn with the numbers of the same command's
JSON, and clicking a cell shows both runs' attention at that layer (the cell's head, or the mean over heads for a
position), each equal to the weights of a separate qkv.run of that prompt (to the page's 2 decimals); prompts of
two lengths show each run at its own length. Nothing fetched, no console error."""

from __future__ import annotations

import json

import numpy as np
import pytest
from clitools import invoke
from pages import open_page
from tiny import make_checkpoint

pytestmark = pytest.mark.browser
CLEAN, CORRUPTED, LONGER = "the cat sat on the", "the dog sat on the", "the dog ran far and sat on the"


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory):
    return make_checkpoint(tmp_path_factory.mktemp("gpt2") / "m", "gpt2")


def make_page(gpt2, tmp_path, corrupted):
    """The page and the JSON of one `qkv patch --what resid --what heads` run."""
    path = tmp_path / "patch.html"
    r = invoke(["patch", CLEAN, corrupted, "--model", gpt2, "--answer", "mat", "--wrong", "cat", "--what", "resid",
                "--what", "heads", "--format", "json", "--page", path])  # fmt: skip
    assert r.exit_code == 0, r.output
    return path, json.loads(r.stdout)


def shown(page, which: int) -> tuple[list[str], np.ndarray]:
    """The column labels and the weights of the which-th matrix under #attention (0: clean, 1: corrupted); an
    empty cell (a key the query may not see) is 0."""
    table = page.query_selector_all("#attention table")[which]
    labels = table.eval_on_selector_all("tr:first-child th", "ths => ths.slice(1).map(t => t.textContent)")
    rows = table.eval_on_selector_all("tr", "trs => trs.slice(1).map(r => [...r.querySelectorAll('td')]"
                                      ".map(td => td.textContent))")  # fmt: skip
    return labels, np.array([[float(v) if v else 0.0 for v in row] for row in rows])


def weights(gpt2, text, layer):  # (tau, m, m) from a separate run of the prompt
    import qkv_cli as qkv

    return qkv.run(text, model=str(gpt2)).attentions[layer]


def test_the_grids_hold_the_recoveries_and_a_click_shows_both_runs_attention(browser, gpt2, tmp_path):
    path, doc = make_page(gpt2, tmp_path, CORRUPTED)
    page, errors, requests = open_page(browser, path)
    grids = page.query_selector_all("#grids table")
    assert len(grids) == 2 and page.inner_text("#grids h2").startswith("resid")
    for table, what in zip(grids, ("resid", "heads"), strict=True):
        cells = table.eval_on_selector_all("td", "tds => tds.map(td => Number(td.textContent))")
        np.testing.assert_allclose(cells, np.ravel(doc["recovery"][what]), atol=0.0051)
    heads = grids[1].query_selector_all("tr")[2].query_selector_all("td")  # layer 1
    heads[2].click()  # head 2
    assert page.inner_text("#attention p") == "layer 1, head 2"
    for which, text in enumerate((CLEAN, CORRUPTED)):
        labels, w = shown(page, which)
        assert labels == text.split()
        np.testing.assert_allclose(w, weights(gpt2, text, 1)[2], atol=0.0051)
    grids[0].query_selector_all("tr")[1].query_selector_all("td")[3].click()  # resid, layer 0, position 3
    assert page.inner_text("#attention p") == "layer 0, mean over heads"
    np.testing.assert_allclose(shown(page, 1)[1], weights(gpt2, CORRUPTED, 0).mean(axis=0), atol=0.0051)
    assert not errors and requests == [path.resolve().as_uri()]


def test_prompts_of_two_lengths_show_each_run_at_its_length(browser, gpt2, tmp_path):
    path, doc = make_page(gpt2, tmp_path, LONGER)
    page, errors, requests = open_page(browser, path)
    resid = page.query_selector_all("#grids table")[0]
    assert resid.eval_on_selector_all("tr:first-child th", "ths => ths.slice(1).map(t => t.textContent)") == [
        "0 the", "2/5 sat", "3/6 on", "4/7 the"]  # fmt: skip
    assert "paired 0 and 2..4 -> 5..7" in page.inner_text("pre")
    resid.query_selector_all("tr")[2].query_selector_all("td")[1].click()  # layer 1, the pair (2, 5)
    clean_labels, clean = shown(page, 0)
    longer_labels, longer = shown(page, 1)
    assert clean.shape == (5, 5) and longer.shape == (8, 8) and longer_labels == LONGER.split()
    np.testing.assert_allclose(clean, weights(gpt2, CLEAN, 1).mean(axis=0), atol=0.0051)
    np.testing.assert_allclose(longer, weights(gpt2, LONGER, 1).mean(axis=0), atol=0.0051)
    assert not errors and requests == [path.resolve().as_uri()]
