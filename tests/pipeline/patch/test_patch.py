"""The patching engine on tiny checkpoints: properties a patch must have whatever the weights, the refusals (before
any forward), and the cache (a patch from the cached residual stream equals the same patch from the embedding).
The numbers themselves are checked against transformers with hooks in tests/models/test_patch_reference.py."""

from __future__ import annotations

import numpy as np
import pytest
from tiny import make_checkpoint

from qkv_cli.errors import QkvError, TooLargeError
from qkv_cli.models import load_model
from qkv_cli.pipeline.patch import engine
from qkv_cli.pipeline.patch.names import WHAT

CLEAN, CORRUPTED = "the cat sat on the", "the dog sat on the"  # one word swapped, at position 1


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory):
    return load_model(make_checkpoint(tmp_path_factory.mktemp("gpt2") / "m", "gpt2"), dtype="float64")


def run(model, **kw):
    return engine.patch(model, CLEAN, CORRUPTED, kw.pop("answer", "mat"), kw.pop("wrong", "cat"), **kw)


def test_the_last_layers_residual_at_the_last_position_is_the_clean_run(gpt2):
    """x_L[last] decides the logits alone: patching it gives the clean metric (recovery 1), and in the noise
    direction the corrupted one (recovery 0). Positions before the swapped word are the same in both runs
    (causal): patching them changes nothing (recovery exactly 0 in both directions, from every layer)."""
    denoise = run(gpt2, what=("resid",))
    noise = run(gpt2, what=("resid",), direction="noise")
    L = gpt2.config.n_layers
    assert denoise.recovery["resid"].shape == (L, 5)
    assert denoise.recovery["resid"][L - 1, -1] == pytest.approx(1.0, abs=1e-12)
    assert noise.recovery["resid"][L - 1, -1] == pytest.approx(0.0, abs=1e-12)
    assert (denoise.recovery["resid"][:, 0] == 0).all() and (noise.recovery["resid"][:, 0] == 1).all()
    assert denoise.differing() == [1]


@pytest.mark.parametrize("what", WHAT)
def test_a_sweep_from_the_cache_equals_every_patch_from_the_embedding(gpt2, what):
    cached = run(gpt2, what=(what,))
    again = run(gpt2, what=(what,), reuse=False)
    np.testing.assert_array_equal(cached.recovery[what], again.recovery[what])
    assert np.isfinite(cached.recovery[what]).all() and np.abs(cached.recovery[what]).max() > 0


def test_the_metrics(gpt2):
    """prob without --wrong; kl: the clean run's KL to itself is 0, and the recovery is 1 - KL(patched) / KL(X)."""
    prob = run(gpt2, wrong=None, what=("heads",))
    assert prob.metric == "prob" and 0 < prob.metric_clean < 1 and 0 < prob.metric_corrupted < 1
    kl = run(gpt2, metric="kl", what=("heads",))
    assert kl.metric_clean == 0 and kl.metric_corrupted > 0
    np.testing.assert_allclose(kl.recovery["heads"], 1 - kl.metric_values["heads"] / kl.metric_corrupted, atol=1e-12)


def test_the_grids_shapes_and_labels(gpt2):
    c = gpt2.config
    p = run(gpt2, what=("pattern", "resid", "k"))
    assert p.what == ("resid", "k", "pattern")  # in WHAT's order
    assert p.recovery["k"].shape == (c.n_layers, c.G) and p.recovery["pattern"].shape == (c.n_layers, c.n_heads)
    assert p.column_labels("resid")[1] == "1 cat/dog" and p.column_labels("k")[0] == "KV0"
    top = p.top(3)
    assert [r["recovery"] for r in top] == sorted((r["recovery"] for r in p.top(None)), reverse=True)[:3]
    assert set(p.arrays()) >= {"recovery_resid", "recovery_k", "metric_clean", "metric_corrupted", "labels_clean"}


def never(*args, **kwargs):
    raise AssertionError("a forward ran before the refusal")


@pytest.mark.parametrize("kw, fragments", [
    (dict(corrupted="the dog sat on the mat"), ("5 tokens", "6")),
    (dict(answer="cat sat"), ("--answer 'cat sat' is 2 tokens", "'cat', 'sat'")),
    (dict(wrong="cat dog"), ("--wrong",)),
    (dict(what=("nope",)), ("unknown --what 'nope'", "resid")),
    (dict(what=()), ("--what",)),
    (dict(metric="logit-diff", wrong=None), ("needs --wrong",)),
    (dict(direction="sideways"), ("--direction",)),
    (dict(corrupted=CLEAN), ("same prob", "nothing to recover")),
])  # fmt: skip
def test_bad_input_is_refused_before_any_forward(gpt2, monkeypatch, kw, fragments):
    if "same" not in fragments[0]:
        monkeypatch.setattr(engine.Runner, "run", never)
    args = dict(answer="mat", wrong=None if kw.get("metric") else "cat") | kw
    if "same" in fragments[0]:
        args["wrong"] = None
    with pytest.raises(QkvError) as err:
        engine.patch(gpt2, CLEAN, args.pop("corrupted", CORRUPTED), args.pop("answer"), args.pop("wrong"), **args)
    for f in fragments:
        assert f in str(err.value)


def test_max_memory_counts_the_cache_and_refuses_before_a_forward(gpt2, monkeypatch):
    monkeypatch.setattr(engine.Runner, "run", never)
    small = engine.needed_bytes(gpt2, 5, ("resid",)) + gpt2.weights_bytes
    big = engine.needed_bytes(gpt2, 5, WHAT)
    assert big > engine.needed_bytes(gpt2, 5, ("resid",))  # the cache holds only what --what needs
    with pytest.raises(TooLargeError, match="qkv patch .*--max-memory.*fewer --what"):
        run(gpt2, what=WHAT, max_memory=small)


def test_a_family_without_intervention_points_is_refused(gpt2, monkeypatch):
    monkeypatch.setattr(gpt2.family, "block", lambda p, c, layer, x, mask, kernel: None)  # no edit argument
    monkeypatch.setattr(engine.Runner, "run", never)
    with pytest.raises(QkvError, match="no intervention points"):
        engine.patch(gpt2, CLEAN, CORRUPTED, "mat", "cat", what=("resid",))


def test_an_encoder_without_a_masked_lm_head_is_refused_before_any_forward(tmp_path, monkeypatch):
    """A sentence-transformer's BERT (as the shipped MiniLM) stores no cls.predictions: nothing scores the answer."""
    bert = load_model(make_checkpoint(tmp_path / "bert", "bert"), dtype="float64")
    monkeypatch.setattr(engine.Runner, "run", never)
    with pytest.raises(QkvError, match="has no masked-LM head") as err:
        engine.patch(bert, "the cat sat", "the dog sat", "mat", "cat", what=("resid",), position=2)
    assert "\n" not in str(err.value)


def test_the_recording_pass_is_the_plain_forward(gpt2):
    """The intervention points read without changing anything: the hidden states are the plain forward's, bit for
    bit."""
    from qkv_cli.pipeline.patch.hooks import Recorder

    ids = gpt2.tokenize(CLEAN).ids
    plain = gpt2.forward(ids)
    runner = engine.Runner(gpt2)
    hidden, _ = runner.run(ids, Recorder(WHAT, gpt2.config.n_layers))
    L = gpt2.config.n_layers
    for l in range(L - 1):
        np.testing.assert_array_equal(hidden[l + 1], plain.hidden_states[l + 1])
    final = gpt2.family.final(gpt2.params, gpt2.config, hidden[L])  # the forward's last entry is after the final norm
    np.testing.assert_array_equal(final, plain.hidden_states[L])
