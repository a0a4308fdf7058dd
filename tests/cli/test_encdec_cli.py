"""qkv run / explain / heatmap / generate / shapes on tiny encoder-decoders (T5, BART, Marian) saved by transformers,
and the bad inputs that must give one line and exit 2."""

from __future__ import annotations

import json

import numpy as np
import pytest
from clitools import assert_one_line_error, invoke
from encdecs import CASES, build, edit_config
from tiny import make_checkpoint

pytestmark = pytest.mark.reference
SOURCE, TARGET = "the cat sat on the mat", "le chat est assis"


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    from helpers import BuiltOnce

    return BuiltOnce(tmp_path_factory, build)


@pytest.mark.parametrize("name", ["t5", "bart", "marian"])
def test_run_json_exports_the_three_attentions_under_transformers_names(name, folders, torch):
    folder, model = folders[name]
    r = invoke(["run", SOURCE, "--model", folder, "--target", TARGET, "--format", "json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    ids, dec = doc["ids"], doc["decoder_ids"]
    assert dec[0] == model.config.decoder_start_token_id and len(dec) >= 1 + len(TARGET.split()) + 1  # </s>
    with torch.no_grad():
        out = model(input_ids=torch.tensor([ids]), decoder_input_ids=torch.tensor([dec]), output_attentions=True)
    for key in ("encoder_attentions", "decoder_attentions", "cross_attentions"):
        want = np.stack([a[0].numpy() for a in getattr(out, key)])
        np.testing.assert_allclose(np.array(doc[key]), want, atol=1e-5)
    L, tau = model.config.decoder_layers if name != "t5" else 3, 4 if name != "bart" else 2
    assert np.array(doc["cross_attentions"]).shape == (L, tau, len(dec), len(ids))
    assert np.array(doc["attentions"]).shape == np.array(doc["cross_attentions"]).shape  # the default: cross


def test_attention_picks_rows_and_columns(folders):
    folder, _ = folders["bart"]
    for attention in ("cross", "encoder", "decoder"):
        r = invoke(["run", "the cat", "--model", folder, "--target", "le chat", "--attention", attention,
                    "--head", "0"])  # fmt: skip
        assert r.exit_code == 0, r.output
        assert f"({attention}_attention)" in r.stdout
    cross = invoke(["run", "the cat", "--model", folder, "--target", "le chat", "--attention", "cross"]).stdout
    assert "cross-attention n=4" in cross  # <s> the cat </s>: the source's tokens are the columns


def test_ablate_v_on_cross_attention_keeps_the_weights_and_moves_the_output(folders):
    folder, _ = folders["marian"]
    r = invoke(["run", SOURCE, "--model", folder, "--target", TARGET, "--ablate", "v", "--show", "weights"])
    assert r.exit_code == 0, r.output
    text = " ".join(r.stdout.split())
    line = text[text.index("ablated V") :]
    assert "unchanged: Q, K, weights" in line
    assert "output 0," not in line and "output 0;" not in line
    q = invoke(["run", SOURCE, "--model", folder, "--target", TARGET, "--ablate", "q", "--show", "weights"]).stdout
    assert "weights 0," not in q  # Q = 0: uniform weights over the source


def test_explain_cross_says_where_q_k_v_come_from(folders):
    folder, _ = folders["t5"]
    r = invoke(["explain", SOURCE, "--model", folder, "--target", TARGET, "--attention", "cross", "--layer", "0"])
    assert r.exit_code == 0, r.output
    assert "queries from X (the decoder's stream, target tokens), keys and values from Y (the encoder's output" in (
        " ".join(r.stdout.split())
    )


def test_heatmap_of_cross_attention(folders, tmp_path):
    folder, _ = folders["t5"]
    out = tmp_path / "cross.png"
    r = invoke(["heatmap", SOURCE, "--model", folder, "--target", TARGET, "--layer", "1", "--out", out])
    assert r.exit_code == 0, r.output
    assert out.stat().st_size > 1000


@pytest.mark.parametrize("name", ["t5", "bart"])
def test_generate_writes_what_transformers_writes_and_shows_the_alignment(name, folders, torch):
    folder, model = folders[name]
    r = invoke(["generate", SOURCE, "--model", folder, "--max-new-tokens", "4", "--format", "json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    with torch.no_grad():
        want = model.generate(torch.tensor([doc["ids"]]), max_new_tokens=4, do_sample=False, num_beams=1,
                              use_cache=False)[0].tolist()  # fmt: skip
    assert doc["decoder_ids"] == want[1:]
    align = np.array(doc["alignment"])
    assert align.shape == (len(want) - 1, len(doc["source_tokens"]))
    np.testing.assert_allclose(align.sum(axis=1), 1.0, atol=1e-5)
    table = invoke(["generate", SOURCE, "--model", folder, "--max-new-tokens", "2"]).stdout
    assert "read most" in table and "KV cache" in table


def test_shapes_lists_encoder_decoder_and_cross_with_their_own_sizes(folders):
    folder, _ = folders["bart"]
    r = invoke(["shapes", "--model", folder, "--m", "5", "--n", "7", "--format", "json"])
    assert r.exit_code == 0, r.output
    mats = json.loads(r.stdout)["matrices"]
    assert mats["encoder.weights"] == [7, 7] and mats["decoder.weights"] == [5, 5]
    assert mats["cross.weights"] == [5, 7] and mats["cross.K"] == [7, 16] and mats["cross.Q"] == [5, 16]


def test_bad_input_is_one_line(folders, tmp_path):
    bart, _ = folders["bart"]
    long = " ".join(["cat"] * 30)  # BART's 24 positions
    assert_one_line_error(invoke(["run", "the cat", "--model", bart, "--target", long]), "target has 33 tokens",
                          "at most 24")  # fmt: skip
    assert_one_line_error(invoke(["run", long, "--model", bart, "--target", "le"]), "32 tokens", "at most 24")
    assert_one_line_error(invoke(["generate", long, "--model", bart]), "at most 24")
    gpt2 = make_checkpoint(tmp_path / "gpt2", "gpt2")
    assert_one_line_error(invoke(["run", "the cat", "--model", gpt2, "--target", "le"]), "--target needs an "
                          "encoder-decoder model")  # fmt: skip
    bert = make_checkpoint(tmp_path / "bert", "bert")
    assert_one_line_error(invoke(["run", "the cat", "--model", bert, "--attention", "cross"]), "--attention cross",
                          "encoder-decoder")  # fmt: skip
    assert_one_line_error(invoke(["run", "the cat", "--attention", "cross"]), "--attention needs --model")
    assert_one_line_error(invoke(["view", "the cat", "--model", bart, "--target", long, "--out", tmp_path / "p.html"]),
                          "at most 24")  # fmt: skip
    assert_one_line_error(invoke(["mask", "the cat", "--model", bart, "--attention", "sideways"]), "sideways")


@pytest.mark.parametrize(("name", "changes", "fragment"), [
    ("bart", {"decoder_attention_heads": 5}, "divisible by decoder_attention_heads"),
    ("marian", {"decoder_vocab_size": 60}, "decoder_vocab_size (60) differs"),
    ("bart", {"decoder_start_token_id": 999}, "decoder_start_token_id (999)"),
    ("t5", {"feed_forward_proj": "gated-gelu-x"}, "feed_forward_proj"),
    ("t5", {"relative_attention_num_buckets": 2}, "relative_attention_num_buckets"),
    ("t5", {"d_kv": 7}, "has shape"),
])  # fmt: skip
def test_contradictory_configs_are_one_line(name, changes, fragment, tmp_path, torch, transformers):
    folder = tmp_path / name
    build(transformers, torch, name, folder)
    edit_config(folder, **changes)
    assert_one_line_error(invoke(["run", "the cat", "--model", folder, "--target", "le"]), fragment)


def test_every_case_is_built(folders):
    assert {CASES[n][0] for n in CASES} == {"t5", "mt5", "umt5", "bart", "marian"}
