"""Prompts of two lengths and the answer position (pipeline.patch.pairs) on a tiny GPT-2: the common start and end
are paired as `qkv compare` aligns texts, a patch copies a position into its partner (checked against the same
patch made by hand with Model.forward and Model.layer_output), and prompts that cannot be paired so are refused
before any forward, naming both lengths."""

from __future__ import annotations

import numpy as np
import pytest
from tiny import make_checkpoint

from qkv_cli.errors import QkvError
from qkv_cli.models import load_model
from qkv_cli.pipeline.patch import engine

CLEAN, LONGER = "the cat sat on the", "the dog ran far and sat on the"  # 5 and 8 tokens: "the" | ... | "sat on the"


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory):
    return load_model(make_checkpoint(tmp_path_factory.mktemp("gpt2") / "m", "gpt2"), dtype="float64")


def run(model, corrupted=LONGER, **kw):
    return engine.patch(model, CLEAN, corrupted, "mat", "cat", **kw)


def test_the_common_start_and_end_are_paired_and_named(gpt2):
    p = run(gpt2, what=("resid", "mlp"))
    assert p.pairs == [[0, 0], [2, 5], [3, 6], [4, 7]] and p.answer_position == (4, 7)
    assert p.recovery["resid"].shape == p.recovery["mlp"].shape == (gpt2.config.n_layers, 4)
    assert p.column_labels("resid") == ["0 the", "2/5 sat", "3/6 on", "4/7 the"]
    summary = p.summary()
    assert summary["pairs"] == p.pairs and summary["answer_position"] == {"clean": 4, "corrupted": 7}
    assert p.arrays()["pairs"].shape == (4, 2) and p.differing() == [1]  # the clean prompt's unpaired position


def test_the_last_pair_decides_and_the_common_start_changes_nothing(gpt2):
    """x_L at the answer pair is the clean run (1; noise: the corrupted run, 0); position 0 comes before the
    change, so a decoder holds the same residual stream there in both runs (exactly 0 from every layer)."""
    L = gpt2.config.n_layers
    denoise, noise = run(gpt2, what=("resid",)), run(gpt2, what=("resid",), direction="noise")
    assert denoise.recovery["resid"][L - 1, 3] == pytest.approx(1.0, abs=1e-12)
    assert noise.recovery["resid"][L - 1, 3] == pytest.approx(0.0, abs=1e-12)
    assert (denoise.recovery["resid"][:, 0] == 0).all()


def test_a_patch_across_lengths_is_the_one_made_by_hand(gpt2):
    """x_1 of the longer run with position 5 replaced by the clean run's position 2, layer 1 rerun by
    Model.layer_output, the logits of the last position: the metric equals the grid's cell (layer 0, pair 1)."""
    fam, p, c = gpt2.family, gpt2.params, gpt2.config
    clean = gpt2.forward(gpt2.tokenize(CLEAN).ids).hidden_states
    corrupted = gpt2.forward(gpt2.tokenize(LONGER).ids).hidden_states
    x = np.array(corrupted[1])
    x[5] = clean[1][2]
    out, _ = gpt2.layer_output(1, x)
    z = fam.logits(p, c, fam.final(p, c, out[-1:]))[0]
    mat, cat = (gpt2.tokenize(w, special=False).ids[0] for w in ("mat", "cat"))
    result = run(gpt2, what=("resid",))
    assert result.metric_values["resid"][0, 1] == pytest.approx(z[mat] - z[cat], abs=1e-12)
    assert result.metric_values["resid"][0, 1] != result.metric_corrupted


@pytest.mark.parametrize("what", ["attn", "heads", "q", "k", "v"])
def test_across_lengths_a_sweep_from_the_cache_equals_every_patch_from_the_embedding(gpt2, what):
    cached, again = run(gpt2, what=(what,)), run(gpt2, what=(what,), reuse=False)
    np.testing.assert_array_equal(cached.recovery[what], again.recovery[what])
    assert np.isfinite(cached.recovery[what]).all() and np.abs(cached.recovery[what]).max() > 0


def test_position_on_a_decoder_reads_the_metric_there(gpt2):
    """--position 2: the next-token scores after 'sat'. x_L there is the clean run; the positions after it cannot
    reach it (causal): exactly 0."""
    p = engine.patch(gpt2, CLEAN, "the dog sat on the", "mat", "cat", what=("resid",), position=2)
    L = gpt2.config.n_layers
    assert p.answer_position == (2, 2) and p.recovery["resid"][L - 1, 2] == pytest.approx(1.0, abs=1e-12)
    assert (p.recovery["resid"][:, 3:] == 0).all()


def test_rotated_queries_and_keys_are_not_moved_to_other_positions(tmp_path, monkeypatch):
    """A RoPE decoder's Q and K are patched after the rotation: the common end sits at 2..4 of the clean prompt and
    5..7 of the longer one, so --what q and k are refused there (v, which RoPE leaves alone, is not)."""
    tied = {"tie_word_embeddings": True}  # the output head is E
    llama = load_model(make_checkpoint(tmp_path / "llama", "llama", config_overrides=tied), dtype="float64")
    assert run(llama, what=("v",)).recovery["v"].shape == (2, 2)
    monkeypatch.setattr(engine.Runner, "run", never)
    with pytest.raises(
        QkvError, match=r"5 tokens and the corrupted one 8: --what q k copies queries or keys after RoPE"
    ):
        run(llama, what=("q", "k", "v"))


def never(*args, **kwargs):
    raise AssertionError("a forward ran before the refusal")


@pytest.mark.parametrize("corrupted, kw, fragments", [
    ("a dog ran far", {}, ("the clean prompt is 5 tokens and the corrupted one 4", "neither their first nor")),
    ("the dog sat on the mat", {}, ("5 tokens and the corrupted one 6", "answer position 4 ('the')", "no partner")),
    (LONGER, {"position": 1}, ("answer position 1 ('cat')", "no partner")),
    (LONGER, {"what": ("heads", "pattern")}, ("5 tokens and the corrupted one 8", "--what pattern")),
    ("the dog sat on the", {"position": 5}, ("--position 5 is outside the clean prompt's 5 tokens (0..4)",)),
])  # fmt: skip
def test_prompts_that_cannot_be_paired_are_refused_before_any_forward(gpt2, monkeypatch, corrupted, kw, fragments):
    monkeypatch.setattr(engine.Runner, "run", never)
    with pytest.raises(QkvError) as err:
        run(gpt2, corrupted, **kw)
    assert "\n" not in str(err.value)
    for f in fragments:
        assert f in str(err.value)
