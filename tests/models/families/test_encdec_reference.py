"""T5, T5 v1.1, BART and Marian against transformers: tiny random models built and saved by transformers in the test.

Every layer's encoder, decoder and cross attention within 1e-5 of transformers' eager attention in float32, and
within 1e-10 in float64 (against a twin transformers runs in float64 throughout: decoders.float64_everywhere);
greedy generation writes the ids transformers' generate writes.
"""

from __future__ import annotations

import numpy as np
import pytest
from decoders import float64_everywhere
from encdecs import CASES, build, reference

from qkv_cli.models import load_model

pytestmark = pytest.mark.reference
SOURCES = ([5, 9, 7, 3, 11, 1], [4], [6, 8, 10, 12, 14, 16, 18, 20, 22, 7, 9, 11, 13, 15])
TARGETS = ([4, 8, 6, 10], [], [9, 9, 3, 5, 7, 11, 13, 4, 6, 8, 12])


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    from helpers import BuiltOnce

    return BuiltOnce(tmp_path_factory, build)


def compare(ours, ref, atol, name):
    for side in ("encoder", "decoder", "cross"):
        got = getattr(ours, side)
        assert len(got) == len(ref[side])
        for layer, want in enumerate(ref[side]):
            assert got[layer].weights.shape == want.shape
            np.testing.assert_allclose(got[layer].weights, want, atol=atol, rtol=0, err_msg=f"{name} {side} {layer}")


@pytest.mark.parametrize("name", list(CASES))
def test_float32_attentions_match_transformers_eager(name, built, torch):
    folder, model = built(name)
    ours = load_model(folder, dtype="float32")
    peaks = []
    for src, tgt in zip(SOURCES, TARGETS, strict=True):
        dec = [ours.start_id, *tgt]
        ref = reference(torch, model, src, dec)
        run = ours.teacher_forced(src, dec)
        assert run.cross[0].weights.dtype == np.float32
        peaks += [a.weights.max() for a in run.cross if a.weights.shape[-1] > 1]
        compare(run, ref, 1e-5, name)
        np.testing.assert_allclose(ours.logits(run.decoder_output), ref["logits"], atol=1e-4, rtol=1e-4)
    assert max(peaks) > 0.5  # peaked cross-attention: mistakes would show


@pytest.mark.parametrize("name", list(CASES))
def test_float64_attentions_match_transformers_float64(name, built, torch, transformers):
    folder, model = built(name)
    ours = load_model(folder, dtype="float64")
    with float64_everywhere(torch):
        twin = transformers.AutoModelForSeq2SeqLM.from_config(model.config, attn_implementation="eager",
                                                              dtype=torch.float64)  # fmt: skip
        twin.load_state_dict(model.state_dict())
        twin.eval()
        for src, tgt in zip(SOURCES, TARGETS, strict=True):
            dec = [ours.start_id, *tgt]
            ref = reference(torch, twin, src, dec)
            compare(ours.teacher_forced(src, dec), ref, 1e-10, name)


@pytest.mark.parametrize("name", list(CASES))
def test_greedy_generation_matches_transformers_generate(name, built, torch):
    folder, model = built(name)
    ours = load_model(folder, dtype="float32")
    for src in SOURCES:
        ids, probs, rows = ours.generate(src, 8, eos=ours.config.eos)
        with torch.no_grad():  # transformers' own cache mis-sizes a decoder deeper than its encoder: without it
            want = model.generate(torch.tensor([src]), max_new_tokens=8, do_sample=False, num_beams=1,
                                  use_cache=False)[0].tolist()  # fmt: skip
        assert want[0] == ours.start_id
        assert ids.tolist() == want[1:]
        assert rows.shape == (len(ids), ours.dec_layers, ours.dec_heads, len(src))
        np.testing.assert_allclose(rows.sum(axis=-1), 1.0, atol=1e-5)
        assert np.all((probs > 0) & (probs <= 1))


@pytest.mark.parametrize("name", ["t5", "bart"])
def test_generation_cross_rows_equal_the_teacher_forced_pass(name, built):
    """The cache path (one query row per step) against the whole pass over what was written."""
    folder, _ = built(name)
    ours = load_model(folder, dtype="float64")
    src = SOURCES[0]
    ids, _, rows = ours.generate(src, 6)
    run = ours.teacher_forced(src, [ours.start_id, *ids[:-1].tolist()])
    full = np.stack([c.weights for c in run.cross])  # (L, tau, m, n)
    np.testing.assert_allclose(rows, full.transpose(2, 0, 1, 3), atol=1e-12)
