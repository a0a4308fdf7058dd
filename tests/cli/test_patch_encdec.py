"""`qkv patch` on an encoder-decoder through the CLI and the API: two sources, one teacher-forced --target,
--attention encoder|decoder|cross; the table, JSON, NPZ, page, what a patch recomputes, and bad input in one line.
A tiny random T5 built by transformers (tests/support/encdecs.py); the numbers themselves are checked against
transformers in tests/pipeline/patch/test_encdec_reference.py."""

from __future__ import annotations

import json

import numpy as np
import pytest
from clitools import assert_one_line_error, invoke
from encdecs import build
from tiny import make_checkpoint

pytestmark = pytest.mark.reference  # transformers builds the model
CLEAN, CORRUPTED, TARGET = "the cat sat on the mat", "the dog sat on the mat", "le chat"


@pytest.fixture(scope="module")
def t5(tmp_path_factory):
    from helpers import reference_import

    folder = tmp_path_factory.mktemp("t5") / "tiny-t5"
    build(reference_import("transformers"), reference_import("torch"), "t5", folder)
    return folder


def patch(folder, *args):
    return invoke(["patch", CLEAN, CORRUPTED, "--model", folder, "--target", TARGET, "--answer", "est", *args])


def test_the_table_names_the_sources_the_target_and_the_patched_stack(t5):
    r = patch(t5, "--wrong", "assis", "--what", "v", "--top", "3", "--attention", "encoder")
    assert r.exit_code == 0, r.output
    assert "--attention encoder (7 source tokens; they differ at 1 'cat' -> 'dog')" in r.stdout
    assert "target:    'le chat' (decoder: <pad> le chat; the answer comes next)" in r.stdout
    assert "logit(est) - logit(assis)" in r.stdout and "at the decoder's last position" in r.stdout
    assert "Top 3 patches" in r.stdout and "in the encoder: its layers, the source positions" in r.stdout


@pytest.mark.parametrize("side, shapes", [
    ("encoder", {"resid": (2, 7), "v": (2, 4), "pattern": (2, 4)}),
    ("decoder", {"resid": (3, 3), "v": (3, 4), "pattern": (3, 4)}),
    ("cross", {"resid": (3, 3), "v": (3, 4), "pattern": (3, 4)}),
])  # fmt: skip
def test_json_grids_are_the_chosen_stacks_layers_by_positions_or_heads(t5, side, shapes, tmp_path):
    npz = tmp_path / "p.npz"
    r = patch(t5, "--attention", side, "--format", "json", "--save-npz", npz, *[a for w in shapes for a in
              ("--what", w)])  # fmt: skip
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["attention"] == side and doc["target"] == TARGET and doc["sources"]["corrupted"][1] == "dog"
    assert doc["decoder"] == ["<pad>", "le", "chat"]
    for what, shape in shapes.items():
        assert np.array(doc["recovery"][what]).shape == shape, what
    assert doc["labels"]["v"] == ["H0", "H1", "H2", "H3"]  # each head its own keys and values
    positions = doc["labels"]["resid"]
    assert positions[1] == ("1 cat/dog" if side == "encoder" else "1 le")
    with np.load(npz) as z:
        np.testing.assert_array_equal(z["recovery_v"], np.array(doc["recovery"]["v"]))
        assert list(z["sources_clean"])[1] == "cat"


def test_the_last_decoder_layers_residual_stream_is_the_clean_run(t5):
    """resid at the last decoder layer and position: the patched run's last stream is the clean run's (1 exactly)."""
    doc = json.loads(patch(t5, "--attention", "decoder", "--format", "json").stdout)
    assert doc["recovery"]["resid"][-1][-1] == pytest.approx(1.0, abs=1e-12)
    assert doc["recovery"]["resid"][-1][0] == pytest.approx(0.0, abs=1e-12)  # an earlier position: not read again


def test_the_decoder_self_attentions_first_layer_sees_no_difference(t5):
    """The two runs' decoders read the same target: their first layer's self-attention Q, K, V are equal, so
    patching them recovers nothing; the cross-attention's K and V differ from the first layer on."""
    self_doc = json.loads(patch(t5, "--attention", "decoder", "--what", "k", "--format", "json").stdout)
    cross_doc = json.loads(patch(t5, "--attention", "cross", "--what", "k", "--format", "json").stdout)
    assert np.array(self_doc["recovery"]["k"])[0].tolist() == [0.0] * 4
    assert np.abs(np.array(cross_doc["recovery"]["k"])[0]).max() > 1e-3


def test_a_decoder_patch_recomputes_only_the_decoder_from_its_layer(t5, monkeypatch):
    """The cache: with the encoder's output kept, a cross-attention patch at decoder layer l runs decoder layers
    l.. only and no encoder layer; an encoder patch at layer l runs encoder layers l.. and the whole decoder."""
    from qkv_cli.models import load_model
    from qkv_cli.pipeline.patch.encdec import patch as run

    model = load_model(t5, dtype="float64")
    calls = {"encoder": 0, "decoder": 0}
    for side in calls:
        real = getattr(model, f"{side}_block")

        def counted(*args, real=real, side=side, **kw):
            calls[side] += 1
            return real(*args, **kw)

        monkeypatch.setattr(model, f"{side}_block", counted)
    run(model, CLEAN, CORRUPTED, TARGET, "est", what=("q",), side="cross")
    assert calls == {"encoder": 2 * 2, "decoder": 2 * 3 + 4 * (3 + 2 + 1)}  # two runs; 4 heads at layers 0, 1, 2
    calls.update(encoder=0, decoder=0)
    run(model, CLEAN, CORRUPTED, TARGET, "est", what=("v",), side="encoder")
    assert calls == {"encoder": 2 * 2 + 4 * (2 + 1), "decoder": 2 * 3 + 8 * 3}


def test_the_page_shows_the_cross_attention_over_the_source(t5, tmp_path):
    page = tmp_path / "p.html"
    r = patch(t5, "--what", "v", "--page", page)
    assert r.exit_code == 0, r.output
    text = page.read_text(encoding="utf-8")
    doc = json.loads(text.split('id="qkv-data">')[1].split("</script>")[0])
    assert doc["keys_corrupted"][1] == "dog" and doc["tokens_clean"] == ["<pad>", "le", "chat"]
    assert np.array(doc["attention_clean"]).shape == (3, 4, 3, 7)  # decoder layers, heads, target x source


def test_the_api_is_the_commands_door(t5):
    import qkv_cli as qkv

    doc = json.loads(patch(t5, "--wrong", "assis", "--what", "k", "--format", "json").stdout)
    p = qkv.patch(CLEAN, CORRUPTED, model=str(t5), answer="est", wrong="assis", what=["k"], target=TARGET,
                  side="cross")  # fmt: skip
    np.testing.assert_array_equal(p.recovery("k"), np.array(doc["recovery"]["k"]))
    fig = p.heatmap()
    assert fig.qkv_meta[0].endswith("--attention cross") and fig.axes[0].get_ylabel() == "decoder layer"
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()] == ["0", "1", "2"]


def test_no_target_reads_the_first_target_token(t5):
    r = invoke(["patch", CLEAN, CORRUPTED, "--model", t5, "--answer", "le", "--format", "json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["labels"]["clean"] == ["<pad>"]


@pytest.mark.parametrize("args, fragments", [
    (["--attention", "sideways"], ("sideways",)),
    (["--answer", "le chat"], ("--answer 'le chat' is 2 tokens",)),
    (["--target", "le chat " * 300], ("target", "n_positions")),
])  # fmt: skip
def test_bad_options_are_one_line(t5, args, fragments):
    assert_one_line_error(patch(t5, *args), *fragments)


def test_sources_of_two_lengths_are_one_line(t5):
    r = invoke(["patch", CLEAN, "the dog sat on a big mat", "--model", t5, "--target", TARGET, "--answer", "est"])
    assert_one_line_error(r, "clean source is 7 tokens", "8")


def test_a_decoder_refuses_the_encoder_decoder_options(tmp_path):
    gpt2 = make_checkpoint(tmp_path / "gpt2", "gpt2")
    for extra, flag in ((["--target", "mat"], "--target"), (["--attention", "cross"], "--attention cross")):
        r = invoke(["patch", "the cat sat on the", "the dog sat on the", "--model", gpt2, "--answer", "mat", *extra])
        assert_one_line_error(r, flag, "encoder-decoder")
