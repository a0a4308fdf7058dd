"""`qkv attribute`, `qkv heatmap --method` and the new `qkv heads` options, through the CLI.

The numbers themselves are checked in tests/pipeline/test_attribution.py and tests/core/test_detectors.py; here:
the table, the export names (NPZ, JSON, CSV), one-line errors, the induction probe and the entry point.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from clitools import assert_one_line_error, invoke
from tiny import make_checkpoint

TEXT = "the cat sat on the mat"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny")
    return {family: make_checkpoint(root / family, family) for family in ("bert", "gpt2")}


def ok(args, **kwargs):
    r = invoke(args, env={"COLUMNS": "100"}, **kwargs)
    assert r.exit_code == 0, r.output
    return r


@pytest.mark.parametrize("method", ["rollout", "value-norm", "value-zeroing"])
@pytest.mark.parametrize("family", ["bert", "gpt2"])
def test_export_names(tiny, family, method, tmp_path):
    path = tmp_path / "a.npz"
    doc = json.loads(ok(["attribute", TEXT, "--model", tiny[family], "--method", method, "--format", "json"]).stdout)
    ok(["attribute", TEXT, "--model", tiny[family], "--method", method, "--save-npz", path])
    z = np.load(path)
    names = {"attribution", "method", "layer", "ids", "tokens", "weights"}
    has_heads = method == "value-norm"
    assert names <= set(z.files) and names <= set(doc)
    assert ("attribution_heads" in z.files) == has_heads == ("attribution_heads" in doc)
    m = len(doc["tokens"])
    assert z["attribution"].shape == (m, m) and str(z["method"]) == method == doc["method"]
    assert int(z["layer"]) == doc["layer"] == 1 and list(z["ids"]) == doc["ids"]
    np.testing.assert_allclose(z["attribution"], doc["attribution"], atol=1e-12)
    if has_heads:
        assert z["attribution_heads"].shape == (4, m, m) and z["value_norms"].shape == (4, m)
    if method == "value-zeroing":
        assert doc["cost"]["passes"] == m + 1 and doc["cost"]["bytes"] > 0


def test_table_shows_weights_attribution_and_what_each_key_receives(tiny):
    out = ok(["attribute", TEXT, "--model", tiny["bert"], "--method", "value-norm", "--head", "1"]).stdout
    for piece in ("layer 1: alpha, mean over heads", "||sum_h alpha^h_ij f^h(x_j)||", "alpha, head 1",
                  "||f^1(x_j)||, head 1", "What each key receives", "||f(x_j)||", "value-norm (Kobayashi"):  # fmt: skip
        assert piece in out, piece
    out = ok(["attribute", TEXT, "--model", tiny["gpt2"], "--method", "value-zeroing", "--layer", "0"]).stdout
    assert "passes of layer 0" in out and "value-zeroing share" in out and "·" in out  # causal: masked cells


def test_random_weights_value_norm_and_csv(tmp_path):
    r = ok(["attribute", "the cat sat", "--d", "8", "--tau", "2", "--format", "csv"])
    rows = r.stdout.splitlines()
    assert rows[0] == "matrix,head,query,key,query_token,key_token,value"
    kinds = [row.split(",")[0] for row in rows[1:]]
    assert kinds.count("attribution") == 9 and kinds.count("attribution_heads") == 18 and kinds.count("weights") == 18
    assert kinds.count("value_norms") == 6
    doc = json.loads(ok(["attribute", "the cat sat", "--context", "le chat", "--d", "8", "--tau", "2",
                         "--format", "json"]).stdout)  # fmt: skip
    assert np.shape(doc["attribution"]) == (3, 2) and doc["ids"] is None and doc["context_tokens"] == ["le", "chat"]


def test_kernel_loop_gives_the_same_numbers_through_the_cli(tiny):
    base = ["attribute", TEXT, "--model", tiny["gpt2"], "--method", "value-zeroing", "--format", "json"]
    a = json.loads(ok(base).stdout)["attribution"]
    b = json.loads(ok([*base, "--kernel", "loop"]).stdout)["attribution"]
    np.testing.assert_allclose(a, b, atol=1e-12)


@pytest.mark.parametrize(
    "args,fragments",
    [
        (["attribute", TEXT, "--method", "rollout"], ["--method rollout needs --model"]),
        (["attribute", TEXT, "--method", "value-zeroing"], ["needs --model"]),
        (["attribute", TEXT, "--method", "saliency"], ["--method", "saliency"]),
        (["attribute", TEXT, "--head-fusion", "max"], ["--head-fusion is for --method rollout"]),
        (["attribute", TEXT, "--model", "{bert}", "--method", "rollout", "--head", "0"], ["no per-head attribution"]),
        (["attribute", TEXT, "--model", "{bert}", "--layer", "0", "--layer", "1"], ["give one --layer"]),
        (["attribute", TEXT, "--model", "{bert}", "--layer", "7"], ["layer 7 does not exist"]),
        (["attribute", TEXT, "--model", "{bert}", "--d", "8"], ["--d cannot be used with --model"]),
        (["attribute", TEXT, "--model", "{bert}", "--method", "value-zeroing", "--max-memory", "40KB"],
         ["value-zeroing needs about", "--max-memory"]),
        (["attribute", TEXT, "--save-npz", "nowhere/a.npz"], ["does not exist"]),
        (["heatmap", TEXT, "--model", "{gpt2}", "--method", "rollout", "--generate", "2"], ["--generate"]),
        (["heatmap", TEXT, "--method", "value-norm", "--d", "64", "--tau", "16", *sum([["--head", str(j)]
          for j in range(16)], []), "--out", "a.png"], ["18 panels"]),
        (["heads", "--induction-probe", "3"], ["--induction-probe needs --model"]),
        (["heads", TEXT, "--model", "{gpt2}", "--induction-probe", "3"], ["drop TEXT"]),
        (["heads", "--model", "{gpt2}", "--induction-probe", "7"], ["14 tokens", "12"]),
        (["heads", "--model", "{gpt2}", "--induction-probe", str(10**30)], ["--induction-probe", "smaller N"]),
        (["heads", "--detector-measure", "squared"], ["--detector-measure"]),
    ],
)  # fmt: skip
def test_errors_are_one_line(tiny, args, fragments, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    args = [a.format(**tiny) if isinstance(a, str) else a for a in args]
    assert_one_line_error(invoke(args), *fragments)
    assert not list(tmp_path.iterdir())


def test_heatmap_method_draws_weights_beside_the_attribution(tiny, tmp_path):
    out = tmp_path / "a.png"
    r = ok(["heatmap", TEXT, "--model", tiny["bert"], "--method", "value-norm", "--head", "2", "--out", out])
    assert r.stdout.strip() == str(out) and out.read_bytes()[:4] == b"\x89PNG"
    ok(["heatmap", TEXT, "--model", tiny["gpt2"], "--method", "rollout", "--head-fusion", "min", "--out", out])


# --- qkv heads: detectors, next-token and sink, the probe ----------------------------------------------------


def test_heads_detector_columns_only_when_asked_for_random_weights():
    plain = ok(["heads", TEXT, "--d", "16", "--tau", "2"]).stdout
    assert "Next token, sink and detectors" not in plain and "Before these" not in plain
    asked = ok(["heads", TEXT, "--d", "16", "--tau", "2", "--detectors"]).stdout
    assert "Next token, sink and detectors" in asked and "tl prev" in asked and "Before these: induction" in asked


def test_heads_checkpoint_summary_lines_and_json(tiny):
    out = ok(["heads", TEXT, "--model", tiny["bert"]]).stdout
    lines = [line for line in out.splitlines() if line.startswith("layer ") and ":" in line]
    assert [line.split(":")[0] for line in lines] == ["layer 0", "layer 1"]
    assert all(sum(int(p.split()[0]) for p in line.split(": ")[1].split(", ")) == 4 for line in lines)
    doc = json.loads(ok(["heads", "a cat and a cat", "--model", tiny["gpt2"], "--format", "json"]).stdout)
    head = doc["heads"][0]
    assert {"previous_token", "duplicate_token", "induction", "next", "sink", "sink_token"} <= set(head)
    assert doc["detectors"] == {"measure": "mul", "exclude_first": False, "exclude_current": False}
    assert head["next"] == 0  # causal: the next token is masked
    args = ["heads", "a cat and a cat", "--model", tiny["gpt2"], "--format", "json", "--detector-measure", "abs",
            "--exclude-first", "--exclude-current"]  # fmt: skip
    absolute = json.loads(ok(args).stdout)
    assert absolute["detectors"] == {"measure": "abs", "exclude_first": True, "exclude_current": True}
    assert absolute["heads"][0]["induction"] != head["induction"]


def test_heads_csv_has_the_new_columns():
    rows = ok(["heads", TEXT, "--d", "16", "--tau", "2", "--format", "csv"]).stdout.splitlines()
    assert rows[0].endswith("next,sink,previous_token,duplicate_token,induction,sink_token,role,rows")


def test_induction_probe_repeats_a_seeded_random_sequence(tiny):
    from qkv_cli.pipeline.checkpoint import load
    from qkv_cli.pipeline.probe import probe_ids

    bert, gpt2 = load(str(tiny["bert"]), "float64"), load(str(tiny["gpt2"]), "float64")
    ids = probe_ids(bert, 5, seed=3)
    cls, sep = bert.tokenizer.token_to_id("[CLS]"), bert.tokenizer.token_to_id("[SEP]")
    assert ids[0] == cls and ids[-1] == sep and len(ids) == 12
    assert list(ids[1:6]) == list(ids[6:11]) and len(set(ids[1:6])) == 5 and not {cls, sep} & set(ids[1:11])
    assert list(probe_ids(bert, 5, seed=3)) == list(ids) and list(probe_ids(bert, 5, seed=4)) != list(ids)
    ids = probe_ids(gpt2, 6)  # no special tokens and no bos_token: just the two copies
    assert len(ids) == 12 and list(ids[:6]) == list(ids[6:])
    doc = json.loads(ok(["heads", "--model", tiny["gpt2"], "--induction-probe", "6", "--format", "json"]).stdout)
    assert doc["note"].startswith("induction probe: 6 random tokens (seed 0)") and doc["heads"][0]["rows"] == 12


@pytest.mark.reference
def test_minilm_value_norms_shrink_the_cls_sink(minilm):
    """The README example: [CLS] takes a large share of the weights of the last layer but little of the value norm."""
    args = ["attribute", "The cat sat on the mat because it was warm.", "--model", minilm, "--format", "json"]
    doc = json.loads(ok(args).stdout)
    cls = doc["received"][0]
    assert cls["token"] == "[CLS]" and cls["weight"] > 0.25 and cls["attribution"] < 0.05
    assert min(doc["value_norms"][h][0] for h in range(12)) < np.median(doc["value_norms"])
    heads = json.loads(ok(["heads", "The cat sat on the mat because it was warm.", "--model", minilm,
                           "--format", "json"]).stdout)["heads"]  # fmt: skip
    assert next(h for h in heads if h["layer"] == 1 and h["head"] == 8)["role"] == "next-token"


def test_the_installed_entry_point(tiny):
    script = Path(sys.executable).parent / "qkv"
    qkv = [str(script)] if script.exists() else [sys.executable, "-m", "qkv_cli"]
    args = ["attribute", TEXT, "--model", str(tiny["bert"]), "--method", "rollout", "--format", "json"]
    done = subprocess.run(qkv + args, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    R = np.array(json.loads(done.stdout)["attribution"])
    np.testing.assert_allclose(R.sum(axis=1), 1, atol=1e-6)


def test_option_choices_are_the_registries():
    from qkv_cli.cli.options import HeadFusion, Measure, Method
    from qkv_cli.core.detectors import MEASURES
    from qkv_cli.pipeline.attribution import FUSIONS, METHODS

    assert [m.value for m in Measure] == list(MEASURES)
    assert [m.value for m in Method] == list(METHODS) and [f.value for f in HeadFusion] == list(FUSIONS)


LONG = " ".join([TEXT] * 50)  # 300 words: activations of some 18 MB beside the weights


def heavy_checkpoint(folder, family):
    """Weights of about 51 MB in float64 (400,000 embedding rows: more than the tokenizer uses, as padded
    vocabularies are), more than any attribution's own activations on LONG."""
    from tiny import tiny_tensors

    def widen(tensors):
        tensors.update(tiny_tensors(family, json.loads((folder / "config.json").read_text())))
        tensors.pop("h.0.attn.bias", None)

    positions = "n_positions" if family == "gpt2" else "max_position_embeddings"
    return make_checkpoint(folder, family, config_overrides={"vocab_size": 400_000, positions: 512}, tensor_edit=widen)


@pytest.fixture(scope="module")
def heavy(tmp_path_factory):
    return heavy_checkpoint(tmp_path_factory.mktemp("heavy") / "bert", "bert")


def needs(result) -> float:  # "... needs about 41.3 MB, more than ..." -> bytes
    import re

    line = assert_one_line_error(result, "needs", "--max-memory")
    value, unit = re.search(r"needs (?:about|at least) ([0-9.]+) (B|KB|MB|GB)", line).groups()
    return float(value) * {"B": 1, "KB": 1e3, "MB": 1e6, "GB": 1e9}[unit]


@pytest.mark.parametrize("method", ["value-norm", "rollout", "value-zeroing"])
def test_max_memory_counts_the_weights(heavy, method):
    """attribute refuses where a one-layer run of the same text refuses: the weights are in its estimate too."""
    weights = 8 * 400_000 * 16  # the word embeddings alone, in float64
    run = ["run", LONG, "--model", heavy, "--layer", "1", "--max-memory"]
    tight = int(needs(invoke([*run, f"{int(1.1 * weights)}B"])) * 0.97)  # a little below what the run needs
    assert tight > weights  # the weights fit: it is the weights and the activations together that do not
    needs(invoke(["run", LONG, "--model", heavy, "--layer", "1", "--max-memory", f"{tight}B"]))
    needs(invoke(["attribute", LONG, "--model", heavy, "--method", method, "--max-memory", f"{tight}B"]))
    ok = invoke(["attribute", LONG, "--model", heavy, "--method", method, "--max-memory", "1GB"])
    assert ok.exit_code == 0, ok.output


OTHERS = {"generate": ["generate", LONG, "--max-new-tokens", "2", "--dtype", "float64"],
          "induction-probe": ["heads", "--induction-probe", "100"]}  # fmt: skip


@pytest.mark.parametrize("args", OTHERS.values(), ids=list(OTHERS))
def test_other_model_commands_count_the_weights(args, tmp_path):
    folder = heavy_checkpoint(tmp_path / "gpt2", "gpt2")
    weights = 8 * 400_000 * 16  # the token embeddings alone, in float64
    assert needs(invoke([*args, "--model", folder, "--max-memory", "52MB"])) > weights
