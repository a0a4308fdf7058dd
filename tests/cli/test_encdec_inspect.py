"""qkv heads, attribute and mask on tiny encoder-decoders (T5, BART) saved by transformers: --attention picks the
encoder's or the decoder's self-attention, or the cross-attention; the numbers come from transformers' own
attentions and projections."""

from __future__ import annotations

import json

import numpy as np
import pytest
from clitools import assert_one_line_error, invoke
from encdecs import build
from tiny import make_checkpoint

pytestmark = pytest.mark.reference
SOURCE, TARGET = "the cat sat on the mat", "le chat est assis"


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    from helpers import BuiltOnce

    return BuiltOnce(tmp_path_factory, build)


def reference(torch, model, folder):
    doc = json.loads(invoke(["run", SOURCE, "--model", folder, "--target", TARGET, "--format", "json"]).stdout)
    with torch.no_grad():
        out = model(input_ids=torch.tensor([doc["ids"]]), decoder_input_ids=torch.tensor([doc["decoder_ids"]]),
                    output_attentions=True)  # fmt: skip
    return doc, out


@pytest.mark.parametrize("attention", ["encoder", "decoder"])
def test_heads_reads_the_chosen_self_attention(attention, folders, torch):
    folder, model = folders["t5"]
    _, out = reference(torch, model, folder)
    r = invoke(["heads", SOURCE, "--model", folder, "--target", TARGET, "--attention", attention, "--format", "json"])
    assert r.exit_code == 0, r.output
    rows = json.loads(r.stdout)["heads"]
    want = np.stack([a[0].numpy() for a in getattr(out, f"{attention}_attentions")])  # (L, tau, m, m)
    assert len(rows) == want.shape[0] * want.shape[1]
    for row in rows:
        w = want[row["layer"], row["head"]]
        assert row["previous"] == pytest.approx(np.mean(np.diag(w, -1)), abs=1e-5)  # the share on key i - 1
        assert row["max_weight"] == pytest.approx(w.max(axis=-1).mean(), abs=1e-5)


def test_attribute_value_norm_of_cross_attention_is_alpha_times_v_wo(folders, torch):
    folder, model = folders["bart"]
    doc, out = reference(torch, model, folder)
    r = invoke(["attribute", SOURCE, "--model", folder, "--target", TARGET, "--attention", "cross", "--format", "json"])
    assert r.exit_code == 0, r.output
    got = json.loads(r.stdout)
    attn = model.model.decoder.layers[-1].encoder_attn
    alpha = out.cross_attentions[-1][0].numpy()  # (tau, m, n): Q from the decoder, K and V from Y
    tau, m, n = alpha.shape
    with torch.no_grad():
        V = attn.v_proj(out.encoder_last_hidden_state[0]).numpy().reshape(n, tau, -1).transpose(1, 0, 2)
    Wo = attn.out_proj.weight.detach().numpy()  # (d, tau d_k)
    dk = V.shape[-1]
    F = np.stack([V[h] @ Wo[:, h * dk : (h + 1) * dk].T for h in range(tau)])  # (tau, n, d): f^h(y_j)
    want = np.linalg.norm(np.einsum("hij,hjd->ijd", alpha, F), axis=-1)
    np.testing.assert_allclose(np.array(got["attribution"]), want, atol=1e-4)
    np.testing.assert_allclose(np.array(got["weights"]), alpha, atol=1e-5)
    assert got["tokens"][0] == "</s>" and len(got["context_tokens"]) == n  # BART's decoder starts with </s>


def test_attribute_rollout_of_the_encoder(folders, torch):
    folder, model = folders["bart"]
    _, out = reference(torch, model, folder)
    r = invoke(["attribute", SOURCE, "--model", folder, "--attention", "encoder", "--method", "rollout",
                "--format", "json"])  # fmt: skip
    assert r.exit_code == 0, r.output
    R = np.eye(out.encoder_attentions[0].shape[-1])
    for a in out.encoder_attentions:
        A = 0.5 * a[0].numpy().mean(axis=0) + 0.5 * np.eye(R.shape[0])
        R = (A / A.sum(axis=-1, keepdims=True)) @ R
    np.testing.assert_allclose(np.array(json.loads(r.stdout)["attribution"]), R, atol=1e-5)


@pytest.mark.parametrize(("attention", "causal"), [("encoder", False), ("decoder", True), ("cross", False)])
def test_mask_of_each_attention(attention, causal, folders):
    folder, _ = folders["t5"]
    doc = json.loads(invoke(["run", SOURCE, "--model", folder, "--target", TARGET, "--format", "json"]).stdout)
    r = invoke(["mask", SOURCE, "--model", folder, "--target", TARGET, "--attention", attention, "--format", "json"])
    assert r.exit_code == 0, r.output
    allowed = np.array(json.loads(r.stdout)["allowed"])
    m = len(doc["ids"]) if attention == "encoder" else len(doc["decoder_ids"])
    n = len(doc["ids"]) if attention != "decoder" else m
    assert allowed.shape == (m, n)
    np.testing.assert_array_equal(allowed, np.tril(np.ones((m, n), bool)) if causal else np.ones((m, n), bool))


@pytest.mark.parametrize(("attention", "causal"), [("encoder", False), ("decoder", True), ("cross", False)])
def test_the_apis_mask_of_each_attention_is_the_clis(attention, causal, folders):
    import qkv_cli as qkv

    folder, _ = folders["t5"]
    cli = json.loads(invoke(["mask", SOURCE, "--model", folder, "--target", TARGET, "--attention", attention,
                             "--format", "json"]).stdout)  # fmt: skip
    got = qkv.mask(SOURCE, model=folder, target=TARGET, attention=attention)
    assert len(got) == 1 and got[0].doc() == cli
    m, n = got[0].allowed.shape
    np.testing.assert_array_equal(got[0].allowed, np.tril(np.ones((m, n), bool)) if causal else np.ones((m, n), bool))


def test_bad_input_is_one_line(folders, tmp_path):
    folder, _ = folders["t5"]
    assert_one_line_error(invoke(["heads", SOURCE, "--model", folder]), "--attention encoder", "decoder")
    assert_one_line_error(invoke(["heads", SOURCE, "--model", folder, "--target", "le", "--attention", "cross"]),
                          "self-attention")  # fmt: skip
    assert_one_line_error(invoke(["attribute", SOURCE, "--model", folder, "--method", "rollout"]), "rollout",
                          "--attention encoder")  # fmt: skip
    assert_one_line_error(invoke(["attribute", SOURCE, "--model", folder, "--method", "value-zeroing"]),
                          "value-zeroing")  # fmt: skip
    gpt2 = make_checkpoint(tmp_path / "gpt2", "gpt2")
    for command in ("heads", "attribute", "mask"):
        assert_one_line_error(invoke([command, "the cat", "--model", gpt2, "--target", "le"]), "--target needs an "
                              "encoder-decoder model")  # fmt: skip
    long = " ".join(["cat"] * 30)
    bart = folders["bart"][0]
    assert_one_line_error(invoke(["mask", "the cat", "--model", bart, "--target", long]), "at most 24")


def test_a_marian_folder_with_only_sentencepiece_models_names_what_is_missing(folders, tmp_path):
    import shutil

    folder = tmp_path / "opus-mt"
    shutil.copytree(folders["bart"][0], folder)
    (folder / "tokenizer.json").unlink()
    for name in ("source.spm", "target.spm", "vocab.json"):
        (folder / name).write_bytes(b"\x00")
    assert_one_line_error(invoke(["run", "the cat", "--model", folder, "--target", "le"]), "no tokenizer.json",
                          "source.spm and target.spm")  # fmt: skip


@pytest.mark.parametrize("name", ["t5", "bart"])
def test_shapes_counts_the_decoders_kv_cache(name, folders):
    folder, model = folders[name]
    c = model.config
    L, tau = c.num_decoder_layers if name == "t5" else c.decoder_layers, c.num_heads if name == "t5" else (
        c.decoder_attention_heads)  # fmt: skip
    dk = c.d_kv if name == "t5" else c.d_model // tau
    r = invoke(["shapes", "--model", folder, "--format", "json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["kv_cache_bytes_per_token"] == 2 * L * tau * dk * 8  # K and V, float64


@pytest.mark.parametrize(("args", "fragment"), [
    (["run", SOURCE, "--target", "le", "--chat"], "--chat is not available for an encoder-decoder"),
    (["run", SOURCE, "--target", "le", "--predict"], "--predict is not available"),
    (["generate", SOURCE, "--temperature", "1.0"], "--temperature is not available"),
    (["generate", SOURCE, "--top-k", "3"], "--top-k is not available"),
    (["generate", SOURCE, "--chat"], "--chat is not available"),
    (["heads", "--induction-probe", "8"], "encoder-decoder"),
])  # fmt: skip
def test_what_an_encoder_decoder_does_not_do_is_refused_not_ignored(args, fragment, folders):
    folder, _ = folders["t5"]
    assert_one_line_error(invoke([*args, "--model", folder]), fragment)
