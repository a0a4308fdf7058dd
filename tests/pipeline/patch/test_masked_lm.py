"""Patching a BERT masked LM (a tiny one with a random cls.predictions head): the metric is read at the answer
position (--position here; the [MASK] found by itself is tests/models/test_patch_bert_reference.py's, on a
vocabulary that has one), and the encoder has no causal mask. The numbers themselves are checked against
transformers' BertForMaskedLM with hooks in tests/models/test_patch_bert_reference.py."""

from __future__ import annotations

import numpy as np
import pytest
from tiny import make_checkpoint

from qkv_cli.errors import QkvError
from qkv_cli.models import load_model
from qkv_cli.pipeline.patch import engine
from qkv_cli.pipeline.patch.names import WHAT

CLEAN, CORRUPTED = "the cat sat on a mat", "the cat sat on a dog"  # [CLS] 1..6 [SEP]: position 6 differs


def with_mlm_head(tensors):
    """BertForMaskedLM's head, as transformers saves it (the decoder matrix tied to the word embeddings)."""
    rng = np.random.default_rng(7)
    V, d = tensors["bert.embeddings.word_embeddings.weight"].shape
    t = "cls.predictions.transform."
    tensors |= {t + "dense.weight": 0.5 * rng.standard_normal((d, d)), t + "dense.bias": 0.1 * rng.standard_normal(d),
                t + "LayerNorm.weight": 1 + 0.1 * rng.standard_normal(d), t + "LayerNorm.bias": rng.standard_normal(d),
                "cls.predictions.bias": 0.1 * rng.standard_normal(V)}  # fmt: skip
    for k in list(tensors):
        if k.startswith("cls."):
            tensors[k] = tensors[k].astype(np.float32)


@pytest.fixture(scope="module")
def bert(tmp_path_factory):
    folder = make_checkpoint(tmp_path_factory.mktemp("bert") / "m", "bert", prefix="bert.", tensor_edit=with_mlm_head)
    return load_model(folder, dtype="float64")


def run(model, at, **kw):
    return engine.patch(model, CLEAN, CORRUPTED, "ran", "far", position=at, **kw)


def test_the_head_reads_the_last_layer_at_the_answer_position_only(bert):
    """The masked-LM scores at position p are a function of x_L[p] alone: patching x_L[p] gives the clean run
    (recovery 1), x_L anywhere else changes nothing (0)."""
    p = run(bert, 2, what=("resid",))
    L, m = bert.config.n_layers, len(bert.tokenize(CLEAN).ids)
    assert p.recovery["resid"].shape == (L, m) and p.answer_position == (2, 2)
    assert p.recovery["resid"][L - 1, 2] == pytest.approx(1.0, abs=1e-12)
    assert (np.delete(p.recovery["resid"][L - 1], 2) == 0).all()


def test_the_encoder_has_no_causal_mask(bert):
    """The answer (position 2) is before the changed word (position 6). In a decoder the positions before a change
    hold the same residual stream in both runs (patching them recovers exactly 0, tests/pipeline/patch/test_patch.py);
    in the encoder every position sees position 6 from layer 0 on, and the changed word itself carries the answer."""
    p = run(bert, 2, what=("resid",))
    assert p.differing() == [6]
    assert p.recovery["resid"][0, 6] != 0
    assert np.abs(p.recovery["resid"][0, :6]).max() > 1e-3


@pytest.mark.parametrize("what", WHAT)
def test_a_sweep_from_the_cache_equals_every_patch_from_the_embedding(bert, what):
    cached = run(bert, 2, what=(what,))
    again = run(bert, 2, what=(what,), reuse=False)
    np.testing.assert_array_equal(cached.recovery[what], again.recovery[what])
    assert np.isfinite(cached.recovery[what]).all() and np.abs(cached.recovery[what]).max() > 0


def test_the_recording_pass_is_the_plain_forward(bert):
    """BERT's intervention points read without changing anything: every hidden state is the forward's, bit for bit."""
    from qkv_cli.pipeline.patch.hooks import Recorder

    ids = bert.tokenize(CLEAN).ids
    plain = bert.forward(ids)
    hidden, _ = engine.Runner(bert).run(ids, Recorder(WHAT, bert.config.n_layers))
    for l in range(bert.config.n_layers + 1):
        np.testing.assert_array_equal(hidden[l], plain.hidden_states[l])


@pytest.mark.parametrize("kw, fragments", [
    (dict(), ("masked LM", "[MASK]", "--position N")),
    (dict(position=8), ("--position 8 is outside the clean prompt's 8 tokens (0..7)",)),
])  # fmt: skip
def test_the_answer_position_is_needed_and_checked_before_any_forward(bert, monkeypatch, kw, fragments):
    """The tiny vocabulary has no [MASK]: without --position nothing names the answer's place."""
    monkeypatch.setattr(engine.Runner, "run", lambda *a, **k: pytest.fail("a forward ran before the refusal"))
    with pytest.raises(QkvError) as err:
        engine.patch(bert, CLEAN, CORRUPTED, "ran", "far", **kw)
    for f in fragments:
        assert f in str(err.value)
