"""The scan's batched forward (pipeline.scan.batch) against one text at a time, on every family: every weight and
every score within 1e-10 in float64, and no weight outside a text's own block (the batch mask: no padding leaks)."""

from __future__ import annotations

import numpy as np
import pytest
from scanning import SENTENCES
from tiny import DECODERS, make_checkpoint

from qkv_cli.api.commands import load
from qkv_cli.pipeline.scan.batch import batches, forward_many, stackable
from qkv_cli.pipeline.scan.block import check_memory, tokenized
from qkv_cli.pipeline.scan.engine import ScanPlan
from qkv_cli.pipeline.scan.scores import Measures, text_scores
from qkv_cli.text.corpus import Record

TOL = 1e-10
ALL = Measures(to=("the", ".", ","))


def runs(model, texts, batch_tokens):
    plan = ScanPlan("corpus", "out", model.name, ALL, batch_tokens=batch_tokens)
    items, problems, _ = tokenized(model, plan, [Record(i, f"line {i + 1}", t) for i, t in enumerate(texts)])
    assert not problems, problems
    return items, forward_many(model, items, plan, check_memory)


def check_batched(model, texts, expect_stacked=True):
    """Batched (every text in one or two batches) == one at a time (Model.forward, as qkv heads), within TOL."""
    items, alone = runs(model, texts, batch_tokens=1)
    lengths = [len(t.strings) for _, t in items]
    assert stackable(model, lengths) is expect_stacked
    _, together = runs(model, texts, batch_tokens=sum(lengths))
    for a, b in zip(alone, together, strict=True):
        assert type(a).__name__ == "ModelResult"
        assert b.attentions.shape == a.attentions.shape
        np.testing.assert_allclose(b.attentions, a.attentions, rtol=0, atol=TOL)
        sa, sb = text_scores(a, ALL), text_scores(b, ALL)
        assert sa.keys() == sb.keys()
        for name in sa:
            np.testing.assert_allclose(sb[name], sa[name], rtol=0, atol=TOL, err_msg=name)
    if expect_stacked:
        assert type(together[0]).__name__ == "TextRun"  # the batch really ran stacked
        if not getattr(model.config.attention, "sinks", False):  # each row's weight is all on its own text's keys
            for b in together:
                np.testing.assert_allclose(b.attentions.sum(axis=-1), 1.0, rtol=0, atol=1e-12)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    made = {}

    def get(family):
        if family not in made:
            folder = make_checkpoint(tmp_path_factory.mktemp(family), family)
            made[family] = load(str(folder))
        return made[family]

    return get


@pytest.mark.parametrize("family", ["bert", "gpt2", *DECODERS])
def test_batched_equals_one_at_a_time(tiny, family):
    check_batched(tiny(family), SENTENCES)


def test_a_neighbour_never_changes_a_texts_scores(tiny):
    """The same text batched beside a short text and beside a long one: the same weights (to rounding)."""
    model = tiny("llama")
    _, short = runs(model, ["the mat", "the cat sat on the mat ."], 64)
    _, long = runs(model, ["the cat sat on the mat .", "a dog ran far and then it slept , the cat sat on the mat"], 64)
    np.testing.assert_allclose(short[1].attentions, long[0].attentions, rtol=0, atol=TOL)


def test_batches_hold_at_most_batch_tokens_rows_shortest_first():
    class T:
        def __init__(self, m):
            self.strings = ("x",) * m

    items = [(i, T(m)) for i, m in enumerate([5, 3, 9, 3, 20, 4])]
    assert batches(items, 10) == [[1, 3, 5], [0], [2], [4]]  # 3 + 3 + 4; 5; 9; 20 alone (longer than 10)


@pytest.mark.reference
@pytest.mark.parametrize(
    "case, stacked",
    [("llama-yarn", True), ("llama-dynamic", False), ("smollm3", True), ("phi3-longrope", False),
     ("gpt_oss", True), ("deepseek_v3", True), ("deepseek_v2", True), ("llama4_text", False)],
)  # fmt: skip
def test_batched_equals_one_at_a_time_on_transformers_built_models(tmp_path, case, stacked):
    """The families tests/tiny.py does not write (built by transformers: tests/decoders.py). Dynamic NTK and
    LongRoPE change their frequencies with the length, Llama 4 tempers queries by absolute position: those run
    one text at a time (stackable is False), and still equal."""
    from decoders import build
    from helpers import reference_import

    torch, transformers = reference_import("torch"), reference_import("transformers")
    build(transformers, torch, case, tmp_path / case)
    texts = ["The cat sat on the mat.", "It was warm, and the dog slept.", "The cat sat on the mat again."]
    check_batched(load(str(tmp_path / case)), texts, stacked)


@pytest.mark.reference
def test_batched_equals_one_at_a_time_on_minilm_and_smollm2():
    from helpers import minilm_dir, smollm2_gguf

    texts = ["The cat sat on the mat.", "Paris is the capital of France, and Rome is the capital of Italy.",
             "It rained."]  # fmt: skip
    for path in (minilm_dir(), smollm2_gguf()):
        check_batched(load(str(path)), texts)
