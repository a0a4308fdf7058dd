"""qkv generate, run --predict / --logit-lens and heatmap --generate on a tiny GPT-2 (no PyTorch needed)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from clitools import assert_one_line_error, invoke
from tiny import make_checkpoint

from qkv_cli.core.numerics import softmax
from qkv_cli.models import load_model


@pytest.fixture
def gpt(tmp_path):
    return make_checkpoint(tmp_path / "gpt", "gpt2")


@pytest.fixture
def bert(tmp_path):
    return make_checkpoint(tmp_path / "bert", "bert")


def test_generate_table_json_csv_npz(gpt, tmp_path):
    args = ["generate", "the cat sat", "--model", gpt, "--max-new-tokens", "4"]
    table = invoke(args)
    assert table.exit_code == 0, table.output
    assert "wrote 4 tokens after a prompt of 3" in table.stdout and "KV cache at the end" in table.stdout
    doc = json.loads(invoke([*args, "--format", "json"]).stdout)
    assert len(doc["steps"]) == 4 and all(len(s["top"]) == 5 and len(s["attended"]) == 3 for s in doc["steps"])
    csv = invoke([*args, "--format", "csv"]).stdout.splitlines()
    assert csv[0] == "step,position,token,id,prob,top,attended" and len(csv) == 5
    path = tmp_path / "gen.npz"
    assert invoke([*args, "--save-npz", path]).exit_code == 0
    npz = np.load(path, allow_pickle=False)
    assert npz["step_attentions"].shape[:2] == (4, 2) and int(npz["prompt_len"]) == 3
    assert npz["step_attentions"].shape[-1] == 3 + 4 - 1  # n_max: the last writing query saw 6 tokens
    assert npz["ids"].tolist()[3:] == npz["step_ids"].tolist()


def test_generated_probabilities_are_the_models_own(gpt):
    """Each step's probability is softmax of the model's scores for the whole sequence at the writing position."""
    model = load_model(gpt, dtype="float64")
    doc = json.loads(invoke(["generate", "the cat", "--model", gpt, "--max-new-tokens", "3", "--format", "json",
                             "--dtype", "float64"]).stdout)  # fmt: skip
    ids = list(model.tokenize("the cat").ids) + [s["id"] for s in doc["steps"]]
    run = model.forward(ids)
    z = model.family.logits(model.params, model.config, run.last_hidden_state)
    for s in doc["steps"]:
        p = softmax(z[s["position"] - 1])
        assert s["id"] == int(np.argmax(p)) and s["prob"] == pytest.approx(p[s["id"]], abs=1e-12)


def test_generate_refusals(gpt, bert):
    assert_one_line_error(invoke(["generate", "the cat", "--model", bert, "--max-new-tokens", "2"]), "encoder",
                          "no output head")  # fmt: skip
    assert_one_line_error(invoke(["generate", "the cat", "--model", gpt, "--max-new-tokens", "20"]),
                          "more than", "12")  # fmt: skip  # the tiny GPT-2 accepts 12 positions
    assert_one_line_error(invoke(["generate", "the cat"]), "needs --model")
    assert_one_line_error(invoke(["generate", "   ", "--model", gpt]), "empty")
    assert_one_line_error(invoke(["generate", "the cat", "--model", gpt, "--chat"]), "no chat template")
    assert_one_line_error(invoke(["generate", "the cat", "--model", gpt, "--head", "9"]), "--head 9")


def test_predict_and_logit_lens(gpt, bert):
    args = ["run", "the cat sat", "--model", gpt, "--predict", "--logit-lens"]
    doc = json.loads(invoke([*args, "--format", "json"]).stdout)
    assert len(doc["predictions"]) == 3 and len(doc["predictions"][0]["top"]) == 5
    assert len(doc["logit_lens"]) == 2 and len(doc["logit_lens"][0]) == 3
    # the lens at the last layer is the prediction itself
    assert [row["id"] for row in doc["logit_lens"][-1]] == [p["top"][0]["id"] for p in doc["predictions"]]
    table = invoke(args)
    assert "Next-token predictions" in table.stdout and "Logit lens" in table.stdout
    assert_one_line_error(invoke(["run", "the cat", "--model", bert, "--predict"]), "encoder")
    assert_one_line_error(invoke(["run", "the cat", "--predict"]), "--predict needs --model")


def test_heatmap_of_a_generation(gpt, tmp_path):
    out = tmp_path / "gen.png"
    r = invoke(["heatmap", "the cat sat", "--model", gpt, "--generate", "3", "--out", out])
    assert r.exit_code == 0, r.output
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_generate_layer_through_the_cli(gpt):
    """--layer picks the layers whose weights rank what each written token read; -1 is the last; out of range is
    one line; two layers give two rankings."""
    args = ["generate", "the cat sat", "--model", gpt, "--max-new-tokens", "2", "--format", "json"]
    for given, shown in (("0", 0), ("1", 1), ("-1", 1), ("-2", 0)):
        r = invoke([*args, "--layer", given])
        assert r.exit_code == 0, r.output
        assert json.loads(r.stdout)["attention_of"].startswith(f"layer {shown}, ")
    assert_one_line_error(invoke([*args, "--layer", "5"]), "layer 5 does not exist", "2 layers")
    doc = json.loads(invoke([*args, "--layer", "0,1"]).stdout)
    assert doc["layers"] == [0, 1] and all(set(s["attended_by_layer"]) == {"0", "1"} for s in doc["steps"])


def test_own_options_have_the_shared_options_types():
    """A command's own option named like a shared one (--layer, --dtype, --seed) reaches the same Request field,
    so it must have the shared option's type: a bare int where a list is read broke `generate --layer`."""
    import inspect
    import typing

    from qkv_cli.cli import app, options

    sets = [v for v in vars(options).values() if isinstance(v, list) and v and isinstance(v[0], tuple)]
    shared = {name: typing.get_args(kind)[0] for group in sets for name, kind, _ in group}
    for command in app.registered_commands:
        own = getattr(command.callback, "__wrapped__", None)
        for p in inspect.signature(own).parameters.values() if own else ():
            if (command.callback.__name__, p.name) == ("compare", "model"):
                continue  # repeatable on purpose (one text on two models); compare reads each one itself
            if (command.callback.__name__, p.name) == ("scan", "detectors"):
                continue  # the scores a scan measures (a comma list), read by the scan itself, never a Request
            if p.name in shared and typing.get_origin(p.annotation) is typing.Annotated:
                assert typing.get_args(p.annotation)[0] == shared[p.name], (command.callback.__name__, p.name)


def test_exclude_first_ranks_the_tokens_after_the_first(gpt):
    """--exclude-first leaves position 0 out of the ranking; the weights shown are the same, not renormalized."""
    args = ["generate", "the cat sat", "--model", gpt, "--max-new-tokens", "3", "--format", "json", "--dtype",
            "float64"]  # fmt: skip
    plain = json.loads(invoke(args).stdout)
    after = json.loads(invoke([*args, "--exclude-first"]).stdout)
    assert after["exclude_first"] is True and plain["exclude_first"] is False
    assert "after the first token" in after["attention_of"]
    for p, a in zip(plain["steps"], after["steps"], strict=True):
        assert all(x["position"] > 0 for x in a["attended"]) and len(a["attended"]) == min(3, p["position"] - 1)
        rest = sorted((x for x in p["attended"] if x["position"] > 0), key=lambda x: -x["weight"])
        assert [x["weight"] for x in a["attended"][: len(rest)]] == pytest.approx([x["weight"] for x in rest])


def test_tokens_appear_as_they_are_written_on_a_terminal(gpt):
    """On a terminal (a pseudo-terminal here) the text is written token by token before the table, and not again;
    through a pipe, the text comes once with the table."""
    import os
    import pty
    import select
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    qkv = shutil.which("qkv") or str(Path(sys.executable).with_name("qkv"))
    args = [qkv, "generate", "the cat sat", "--model", gpt, "--max-new-tokens", "4"]
    piped = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert piped.returncode == 0, piped.stderr
    text = piped.stdout.splitlines()[1]  # the line after "... wrote 4 tokens after a prompt of 3:"
    leader, follower = pty.openpty()
    proc = subprocess.Popen(args, stdout=follower, stderr=subprocess.PIPE, env={**os.environ, "COLUMNS": "200"})
    os.close(follower)
    seen = b""
    while True:
        ready, _, _ = select.select([leader], [], [], 120)
        try:
            chunk = os.read(leader, 65536) if ready else b""
        except OSError:  # the writer closed the terminal
            chunk = b""
        if not chunk:
            break
        seen += chunk
    os.close(leader)
    assert proc.wait(timeout=120) == 0, proc.stderr.read()
    shown = seen.decode("utf-8", "replace").replace("\r\n", "\n")
    assert shown.count(text.strip()) == 1, shown
    assert shown.index(text.strip()) < shown.index("wrote 4 tokens"), shown  # the text first, then the table
