"""`qkv scan`'s numbers: each score equals what `qkv heads TEXT --model M --format json` gives for that text (the
command run text by text: the oracle), and summary.json's statistics equal NumPy's on the Parquet table."""

from __future__ import annotations

import json

import numpy as np
import pytest
from clitools import invoke
from scanning import SENTENCES, corpus_file, require
from tiny import make_checkpoint

import qkv_cli as qkv
from qkv_cli.core.roles import THRESHOLDS


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    return {f: make_checkpoint(tmp_path_factory.mktemp(f), f) for f in ("bert", "gpt2", "qwen3")}


def heads_json(text, model, *options):
    result = invoke(["heads", text, "--model", model, "--format", "json", *options])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)["heads"]


@pytest.mark.parametrize("family", ["bert", "gpt2", "qwen3"])
@pytest.mark.parametrize("options", [(), ("--detector-measure", "abs", "--exclude-first", "--exclude-current")])
def test_every_score_equals_qkv_heads_json(models, tmp_path, family, options):
    require("pyarrow")
    corpus = corpus_file(tmp_path, SENTENCES[:5])
    kw = {"measure": "abs", "exclude_first": True, "exclude_current": True} if options else {}
    exact = qkv.scan(corpus, model=str(models[family]), out=tmp_path / "one", batch_tokens=1, **kw).table
    batched = qkv.scan(corpus, model=str(models[family]), out=tmp_path / "all", shard_size=3, **kw).table
    assert exact.num_rows == batched.num_rows == 5 * 2 * 4  # texts x layers x heads
    for t, text in enumerate(SENTENCES[:5]):
        for row in heads_json(text, str(models[family]), *options):
            at = t * 8 + row["layer"] * 4 + row["head"]
            assert exact.column("text_id")[at].as_py() == t and exact.column("layer")[at].as_py() == row["layer"]
            for name in (
                "entropy",
                "norm_entropy",
                "max_weight",
                "mean_distance",
                "self",
                "previous",
                "first",
                "local",
                "softmax_grad",
                "next",
                "sink",
                "previous_token",
                "duplicate_token",
                "induction",
            ):
                assert exact.column(name)[at].as_py() == row[name], (name, text, row["layer"], row["head"])
                assert abs(batched.column(name)[at].as_py() - row[name]) <= 1e-10, (name, text)


def test_to_mass_is_the_share_on_those_tokens(models, tmp_path):
    """to_[CLS]: the mean over query rows of the weight on the [CLS] key, from qkv.run's weights by hand."""
    require("pyarrow")
    model = qkv.load(str(models["bert"]))
    text = "the cat sat , the dog ran ."
    s = qkv.scan(corpus_file(tmp_path, [text]), model=model, out=tmp_path / "s", to="[CLS],the,,,")
    assert s.scores[-3:] == ["to_[CLS]", "to_the", "to_,"]
    w = qkv.run(text, model=model).attentions  # (L, tau, m, m)
    labels = qkv.run(text, model=model).tokens
    for name, token in (("to_[CLS]", "[CLS]"), ("to_the", "the"), ("to_,", ",")):
        keys = [i for i, t in enumerate(labels) if t == token]
        expected = w[:, :, :, keys].sum(axis=-1).mean(axis=-1).ravel()
        np.testing.assert_allclose(s.table.column(name).to_numpy(), expected, rtol=0, atol=1e-12)


def test_the_summary_is_numpys_on_the_table(models, tmp_path):
    require("pyarrow")
    lines = SENTENCES + ["", "the cat \x07 sat"] + SENTENCES[:3]  # an empty line: recorded, not scanned
    s = qkv.scan(corpus_file(tmp_path, lines), model=str(models["gpt2"]), out=tmp_path / "s", shard_size=4)
    table, summary = s.table, s.summary
    assert summary["records"] == len(lines) and summary["texts"] == len(lines) - 1
    assert [p["text_id"] for p in summary["unreadable"]] == [len(SENTENCES)]
    ids = table.column("text_id").to_numpy().reshape(-1, 8)[:, 0]
    assert list(ids) == [i for i in range(len(lines)) if i != len(SENTENCES)]
    for name in ("previous", "entropy", "induction"):
        x = table.column(name).to_numpy().reshape(-1, 2, 4)  # (texts, L, tau)
        got = summary["scores"][name]
        np.testing.assert_allclose(got["mean"], x.mean(axis=0), rtol=0, atol=1e-12)
        np.testing.assert_allclose(got["std"], x.std(axis=0, ddof=1), rtol=0, atol=1e-12)
        half = 1.959963984540054 * x.std(axis=0, ddof=1) / np.sqrt(len(x))
        np.testing.assert_allclose(got["ci95_high"], x.mean(axis=0) + half, rtol=0, atol=1e-12)
        if name in THRESHOLDS:
            np.testing.assert_allclose(got["holds"], (x >= THRESHOLDS[name]).mean(axis=0), rtol=0, atol=1e-12)
        for l in range(2):
            for j in range(4):
                order = sorted(range(len(x)), key=lambda t: (-x[t, l, j], ids[t]))[:5]
                assert got["top"][l][j] == [[int(ids[t]), float(x[t, l, j])] for t in order]
    best = s.top("previous", 2)
    flat = sorted(((m, l, j) for l, row in enumerate(summary["scores"]["previous"]["mean"])
                   for j, m in enumerate(row)), key=lambda r: -r[0])  # fmt: skip
    assert [(b["layer"], b["head"]) for b in best] == [(l, j) for _, l, j in flat[:2]]


def test_max_tokens_cuts_and_counts_and_strict_records(models, tmp_path):
    require("pyarrow")
    corpus = corpus_file(tmp_path, ["the cat sat on the mat .", "a dog"])
    s = qkv.scan(corpus, model=str(models["qwen3"]), out=tmp_path / "cut", max_tokens=4)
    assert s.summary["cut"] == 1 and set(s.table.column("n_tokens").to_pylist()) == {4, 2}
    strict = qkv.scan(corpus, model=str(models["qwen3"]), out=tmp_path / "strict", max_tokens=4, strict=True)
    assert strict.summary["texts"] == 1 and "past --max-tokens 4" in strict.summary["unreadable"][0]["problem"]
    long = corpus_file(tmp_path, ["the cat sat on the mat and the dog ran far .", "a dog"], "long.txt")  # 13 tokens
    bert = qkv.scan(long, model=str(models["bert"]), out=tmp_path / "bert", max_tokens=13)  # BERT takes 12
    assert bert.summary["texts"] == 1 and "accepts at most 12" in bert.summary["unreadable"][0]["problem"]


def test_detectors_picks_the_columns_and_a_typo_suggests(models, tmp_path):
    require("pyarrow")
    corpus = corpus_file(tmp_path, SENTENCES[:2])
    s = qkv.scan(corpus, model=str(models["bert"]), out=tmp_path / "s", detectors="induction,previous")
    assert s.table.column_names == ["text_id", "layer", "head", "n_tokens", "induction", "previous"]
    with pytest.raises(qkv.QkvError, match="unknown score 'prevous': did you mean 'previous'"):
        qkv.scan(corpus, model=str(models["bert"]), out=tmp_path / "t", detectors="prevous")


@pytest.mark.parametrize("options", [("--causal",), ("--window", "3", "--tokenizer", "bpe")])
def test_random_weights_scores_equal_qkv_heads_json(tmp_path, options):
    """Without a model: seeded random weights, one layer, each text as `qkv heads TEXT --d 32 --heads 4 ...`."""
    require("pyarrow")
    corpus = corpus_file(tmp_path, SENTENCES[:4] + ["the the the cat the the cat"])
    kw = {"causal": True} if options == ("--causal",) else {"window": 3, "tokenizer": "bpe"}
    table = qkv.scan(corpus, out=tmp_path / "s", d=32, heads=4, seed=3, **kw).table
    assert table.num_rows == 5 * 4
    for t, text in enumerate(SENTENCES[:4] + ["the the the cat the the cat"]):
        result = invoke(["heads", text, "--d", "32", "--heads", "4", "--seed", "3", *options, "--format", "json"])
        assert result.exit_code == 0, result.output
        for row in json.loads(result.stdout)["heads"]:
            at = t * 4 + row["head"]
            for name in ("entropy", "norm_entropy", "previous", "first", "sink", "previous_token", "induction"):
                assert table.column(name)[at].as_py() == row[name], (name, text)
    with pytest.raises(qkv.QkvError, match="--heads cannot be used with --model"):
        qkv.scan(corpus, model="nowhere", out=tmp_path / "t", heads=4)


@pytest.mark.reference
@pytest.mark.parametrize("family", ["t5", "bart"])
def test_an_encoder_decoder_is_scanned_on_its_encoder(tmp_path_factory, tmp_path, family):
    """Each score of an encoder-decoder's scan equals `qkv heads TEXT --attention encoder --format json` (tiny
    random T5 and BART that transformers built)."""
    from encdecs import build
    from helpers import BuiltOnce

    require("pyarrow")
    folder, _ = BuiltOnce(tmp_path_factory, build)[family]
    texts = ["the cat sat on the mat", "a dog ran in the park today", "it was warm"]
    table = qkv.scan(corpus_file(tmp_path, texts), model=str(folder), out=tmp_path / "scan").table
    rows = table.to_pylist()
    seen = 0
    for t, text in enumerate(texts):
        for want in heads_json(text, str(folder), "--attention", "encoder"):
            got = [r for r in rows if (r["text_id"], r["layer"], r["head"]) == (t, want["layer"], want["head"])]
            assert len(got) == 1
            for name in ("entropy", "max_weight", "mean_distance", "self", "previous", "first", "previous_token",
                         "duplicate_token", "induction", "sink"):  # fmt: skip
                assert got[0][name] == pytest.approx(want[name], abs=1e-12), (family, text, name)
            seen += 1
    assert seen == table.num_rows > 0
