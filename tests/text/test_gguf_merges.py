"""Merges implied by a GGUF vocabulary without a merge list, against transformers' own `generate_merges`
(tokenization_utils_base), on random vocabularies with tied scores and repeated tokens."""

from __future__ import annotations

import random

import pytest
from helpers import reference_import

from qkv_cli.errors import QkvError
from qkv_cli.text.gguf_builders import check_merges, merges_from_scores


@pytest.mark.reference
@pytest.mark.parametrize("seed", range(6))
def test_merges_equal_transformers_generate_merges(seed):
    reference_import("torch")
    generate_merges = reference_import("transformers.tokenization_utils_base").generate_merges
    rng = random.Random(seed)
    tokens = ["".join(rng.choice("abcd▁") for _ in range(rng.randint(1, 6))) for _ in range(400)]
    scores = [float(rng.randint(-3, 3)) for _ in tokens]  # many ties: the order among them is the point
    vocab = {t: i for i, t in enumerate(tokens)}
    want = generate_merges(vocab, dict(zip(tokens, scores, strict=True)))
    assert len(want) > 100
    assert merges_from_scores(tokens, scores) == want


def test_check_merges_names_the_first_bad_merge():
    vocab = {"a": 0, "b": 1, "ab": 2}
    check_merges([("a", "b")], vocab)
    with pytest.raises(QkvError, match="merge 1 \\('b a'\\) names 'ba'"):
        check_merges([("a", "b"), ("b", "a")], vocab)
