"""What the page shows first, in Chromium: not every head at once (a tangle of lines) but the two heads that
differ most, chosen as the docs say (checked here against NumPy on the NPZ of the same run); and in a generation
page each written token drawn beside its own position among the keys, so its lines reach the keys it read."""

from __future__ import annotations

import numpy as np
import pytest
from tiny import make_checkpoint

pytestmark = pytest.mark.browser

TEXT = "The animal did not cross the street because it was too tired."


def differing_heads(W) -> list[int]:
    """W (tau, m, n): the head farthest from the mean pattern, then the head farthest from that one (mean over
    rows of the total variation); every head when tau <= 2."""
    tau = W.shape[0]
    if tau <= 2:
        return list(range(tau))
    apart = lambda a, b: 0.5 * np.abs(a - b).sum(axis=-1).mean()  # noqa: E731
    mean = W.mean(axis=0)
    a = int(np.argmax([apart(W[h], mean) for h in range(tau)]))
    b = int(np.argmax([-1 if h == a else apart(W[h], W[a]) for h in range(tau)]))
    return sorted([a, b])


@pytest.mark.parametrize("heads", [8, 2])
def test_the_page_starts_with_the_heads_that_differ_most(pages, viewer, heads):
    html, z = pages(TEXT, "--d", "32", "--heads", str(heads), "--causal")
    v = viewer(html)
    expected = differing_heads(z["weights"])
    state = v.js("window.qkvView.state()")
    assert state["heads"] == expected and state["head"] == expected[0], (state, expected)
    caption = v.page.inner_text("#head-caption")
    if heads > 2:
        assert len(expected) == 2 and "differ most" in caption, caption
        v.page.click("#all-heads")  # every head is one click away; the caption no longer says "differ most"
        assert v.js("window.qkvView.state().heads") == list(range(heads))
        assert "differ most" not in v.page.inner_text("#head-caption")
    else:
        assert "differ most" not in caption
    v.clean()


def test_a_generation_draws_each_written_token_beside_the_keys_it_read(page_and_npz, viewer, tmp_path):
    gpt = make_checkpoint(tmp_path / "gpt2", "gpt2")
    options = ["--model", gpt, "--dtype", "float32"]
    html, z = page_and_npz(["the cat sat", "--generate", 6, *options],
                           ["generate", "the cat sat", "--max-new-tokens", 6, *options])  # fmt: skip
    P, (steps, n) = int(z["prompt_len"]), z["step_attentions"].shape[::3]  # n keys: the last token is read by none
    v = viewer(html)
    box = lambda side, i: v.page.locator(f'.tok[data-side="{side}"][data-i="{i}"]').bounding_box()  # noqa: E731
    for t in range(n - P):  # row t (the token written at position P + t) level with key P + t, the same token
        assert abs(box("q", t)["y"] - box("k", P + t)["y"]) < 1, t
    last = box("q", steps - 1)
    read = box("k", P + steps - 2)  # the last key its query read: the row just above it
    assert 0 < last["y"] - read["y"] <= 1.5 * last["height"]
    assert "level with its own position among the keys" in v.page.inner_text("#head-caption")
    v.page.hover(f'.tok[data-side="q"][data-i="{steps - 1}"]')  # its lines drawn, nothing broken
    assert v.js("window.qkvView.state().view") == "head"
    v.clean()
