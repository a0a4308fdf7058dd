"""TransformerLens' head detectors (core.detectors) and the roles that use them, with next-token and sink (core.roles).

Patterns are written out by hand for sequences with known repeats; the scores are checked against values worked
out by hand and against the formulas written as plain loops; a PyTorch transcription of TransformerLens' own
pattern code is a second reference.
"""

from __future__ import annotations

import numpy as np
import pytest

from qkv_cli.core.detectors import (
    MEASURES,
    detector_scores,
    duplicate_token_pattern,
    induction_pattern,
    previous_token_pattern,
    score,
)
from qkv_cli.core.roles import THRESHOLDS, head_stats, layer_head_stats, role
from qkv_cli.errors import QkvError

REPEAT = [5, 7, 9, 5, 7, 9]  # a b c a b c: rows 3, 4, 5 have an earlier copy of their token


def cells(m, ones):  # [m, m] zeros with a 1 at each (i, t)
    P = np.zeros((m, m))
    for i, t in ones:
        P[i, t] = 1
    return P


def test_patterns_of_a_repeated_sequence():
    np.testing.assert_array_equal(previous_token_pattern(4), cells(4, [(1, 0), (2, 1), (3, 2)]))
    np.testing.assert_array_equal(duplicate_token_pattern(REPEAT), cells(6, [(3, 0), (4, 1), (5, 2)]))
    # induction: the token after the earlier copy (a b c a -> the 'b' after the first 'a')
    np.testing.assert_array_equal(induction_pattern(REPEAT), cells(6, [(3, 1), (4, 2), (5, 3)]))


def test_patterns_with_adjacent_and_triple_repeats():
    tokens = [1, 1, 2, 1]  # x x y x
    np.testing.assert_array_equal(duplicate_token_pattern(tokens), cells(4, [(1, 0), (3, 0), (3, 1)]))
    # row 1: the copy at 0 is followed by 1 itself; row 3: copies at 0 and 1 are followed by 1 and 2
    np.testing.assert_array_equal(induction_pattern(tokens), cells(4, [(1, 1), (3, 1), (3, 2)]))
    words = ["the", "cat", "the", "cat"]  # the word tokenizer has no ids: strings compare the same way
    np.testing.assert_array_equal(duplicate_token_pattern(words), cells(4, [(2, 0), (3, 1)]))


def ideal_induction(tokens):  # [m, m]: rows with a target put all weight on it, the others on token 0
    P = induction_pattern(tokens)
    w = P / np.maximum(P.sum(axis=1, keepdims=True), 1)
    w[P.sum(axis=1) == 0, 0] = 1
    return w


def test_scores_worked_by_hand():
    w = ideal_induction(REPEAT)  # rows 0-2 on token 0, rows 3-5 on their induction target
    P = induction_pattern(REPEAT)
    assert score(w, P, "mul") == pytest.approx(3 / 6)  # 3 of 6 rows' weight on the pattern
    assert score(w, P, "mul", exclude_first=True) == pytest.approx(1.0)  # the first key's weight leaves the total
    assert score(w, P, "abs") == pytest.approx(1 - 3 / 6)  # rows 0-2 each miss by |1 - 0| = 1; sum 3, / m = 6
    assert score(w, P, "abs", exclude_first=True) == pytest.approx(1.0)
    half = 0.5 * np.eye(6) + 0.5 * np.eye(6, k=-1)
    half[0, 0] = 1  # row 0 has no previous token: all on itself
    prev = previous_token_pattern(6)
    assert score(half, prev) == pytest.approx(2.5 / 6)
    assert score(half, prev, exclude_current=True) == pytest.approx(1.0)
    assert score(cells(6, [(i, 0) for i in range(6)]), prev, exclude_first=True) == 0  # no weight left: 0, not NaN


def test_abs_is_the_formula_as_loops():
    rng = np.random.default_rng(3)
    w = rng.dirichlet(np.ones(7), size=7)
    P = duplicate_token_pattern([1, 2, 1, 3, 2, 1, 4])
    for first in (False, True):
        for current in (False, True):
            total = 0.0
            for i in range(7):
                for t in range(7):
                    if (first and t == 0) or (current and i == t):
                        continue
                    total += abs(w[i, t] - P[i, t])
            assert score(w, P, "abs", first, current) == pytest.approx(1 - total / 7)
            kept = [(i, t) for i in range(7) for t in range(7) if not ((first and t == 0) or (current and i == t))]
            mul = sum(w[i, t] * P[i, t] for i, t in kept) / sum(w[i, t] for i, t in kept)
            assert score(w, P, "mul", first, current) == pytest.approx(mul)


def test_scores_batch_over_layers_and_heads_and_errors():
    rng = np.random.default_rng(0)
    w = rng.dirichlet(np.ones(6), size=(2, 3, 6))  # (L, tau, m, m)
    got = detector_scores(w, REPEAT)
    for name, P in (("previous_token", previous_token_pattern(6)), ("duplicate_token", duplicate_token_pattern(REPEAT)),
                    ("induction", induction_pattern(REPEAT))):  # fmt: skip
        assert got[name].shape == (2, 3)
        assert got[name][1, 2] == pytest.approx(score(w[1, 2], P))
    assert detector_scores(w, None)["induction"].max() == 0  # no tokens: no repeats
    with pytest.raises(QkvError, match="measure"):
        score(w[0, 0], P, "squared")
    with pytest.raises(QkvError, match="self-attention"):
        score(np.ones((2, 3)) / 3, np.zeros((3, 3)))
    assert MEASURES == ("mul", "abs")


def test_transformer_lens_patterns_transcribed_in_torch(torch):
    """TransformerLens builds the patterns with torch.eye, np.equal and torch.roll: the same on random repeats."""

    def tl_previous(tokens):
        P = torch.zeros(tokens.shape[-1], tokens.shape[-1])
        P[1:, :-1] = torch.eye(tokens.shape[-1] - 1)
        return torch.tril(P)

    def tl_duplicate(tokens):
        grid = tokens.repeat(tokens.shape[-1], 1).numpy()
        eq = np.equal(grid, grid.T).astype(int)
        np.fill_diagonal(eq, 0)
        return torch.tril(torch.as_tensor(eq).float())

    def tl_induction(tokens):
        shifted = torch.roll(tl_duplicate(tokens), shifts=1, dims=1)
        return torch.tril(torch.cat((torch.zeros(tokens.shape[-1], 1), shifted[:, 1:]), dim=1))

    rng = np.random.default_rng(1)
    for m in (2, 5, 17):
        ids = rng.integers(0, 4, size=m)
        tokens = torch.tensor(ids)[None]
        np.testing.assert_array_equal(previous_token_pattern(m), tl_previous(tokens).numpy())
        np.testing.assert_array_equal(duplicate_token_pattern(ids), tl_duplicate(tokens).numpy())
        np.testing.assert_array_equal(induction_pattern(ids), tl_induction(tokens).numpy())


# --- roles: next-token, sink, and the detector roles --------------------------------------------------------


def test_next_token_and_sink_heads_get_their_roles():
    m = 6
    nxt = np.eye(m, k=1)
    nxt[-1, -1] = 1  # the last row has no next token
    s = head_stats([nxt[None]])[0]
    assert s["next"] == 1 and s["role"] == "next-token"
    sink = np.zeros((m, m))
    sink[:, -1] = 1  # everything on the last token ([SEP])
    labels = ["[CLS]", "a", "b", "c", "d", "[SEP]"]
    s = head_stats([sink[None]], labels_list=[labels])[0]
    assert s["sink"] == 1 and s["sink_token"] == "[SEP]" and s["role"] == "sink" and s["first"] == 0
    first = np.zeros((m, m))
    first[:, 0] = 1  # a first-token stays one: the sink looks at keys 1..m-1 only
    s = head_stats([first[None]], labels_list=[labels])[0]
    assert s["role"] == "first-token" and s["sink"] == 0


def test_sink_share_leaves_out_the_sink_token_itself():
    w = np.zeros((4, 4))
    w[[0, 1, 3], 2] = 1  # rows 0, 1, 3 on key 2
    w[2, 0] = 1  # row 2 (the sink) looks elsewhere
    s = head_stats([w[None]])[0]
    assert s["sink"] == 1 and s["sink_token"] == "position 2"


def test_detector_roles_come_first_and_use_the_mul_scores():
    w = ideal_induction(REPEAT)
    s = head_stats([w[None]], tokens_list=[REPEAT])[0]
    assert s["induction"] == pytest.approx(0.5) and s["role"] == "induction"
    dup = duplicate_token_pattern(REPEAT)
    dup[:3, 0] = 1  # rows without an earlier copy: on token 0
    assert head_stats([dup[None]], tokens_list=[REPEAT])[0]["role"] == "duplicate-token"
    # 0.6 on the target, 0.4 spread: mul 0.3 (the threshold), abs 1 - (3 + 3 * 0.8) / 6 = 0.1
    soft = np.full((6, 6), 1 / 6)
    soft[3:] = 0.4 / 5
    soft[3:][induction_pattern(REPEAT)[3:] == 1] = 0.6
    s = head_stats([soft[None]], tokens_list=[REPEAT], measure="abs")[0]
    assert s["induction"] == pytest.approx(0.1) and s["role"] == "induction"
    base = dict.fromkeys(("self", "previous", "first", "local", "norm_entropy"), 0.0)
    assert role(base | {"first": 0.9, "induction": THRESHOLDS["induction"]}) == "induction"
    assert role(base | {"next": 0.6, "self": 0.55}) == "next-token"
    assert THRESHOLDS == {"previous": 0.5, "self": 0.5, "first": 0.5, "local": 0.8, "broad": 0.8, "next": 0.5,
                          "sink": 0.5, "induction": 0.3, "duplicate_token": 0.3}  # fmt: skip


def test_detectors_are_the_mean_over_sentences():
    a = ideal_induction(REPEAT)[None, None]  # induction 0.5
    b = np.full((1, 1, 10, 10), 0.1)  # 10 rows, no repeats: 0
    s = layer_head_stats([a, b], tokens_list=[REPEAT, list(range(10))])[0][0]
    assert s["induction"] == pytest.approx(0.25)  # (0.5 + 0) / 2, not weighted by the 16 rows
    assert s["rows"] == 16


@pytest.mark.reference
def test_minilm_layer_1_head_8_is_next_token(minilm):
    from qkv_cli.pipeline.checkpoint import load, run

    model = load(str(minilm), "float64")
    for text in ("The cat sat on the mat because it was warm.", "The animal didn't cross the street because it was "
                 "too tired."):  # fmt: skip
        r = run(model, text, detail=False)
        grid = layer_head_stats([r.attentions], tokens_list=[r.ids], labels_list=[r.labels])
        assert grid[1][8]["role"] == "next-token", grid[1][8]
        assert grid[0][2]["role"] == "previous-token"  # the existing roles are unchanged
