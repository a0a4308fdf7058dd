"""qkv generate on the real SmolLM2-135M-Instruct GGUF: --layer as the other commands take it, --exclude-first."""

from __future__ import annotations

import json

import numpy as np
import pytest
from clitools import assert_one_line_error, invoke
from helpers import smollm2_gguf

pytestmark = pytest.mark.reference
PROMPT = "The cat sat on the mat"


@pytest.fixture(scope="module")
def smollm2():
    return str(smollm2_gguf())


def generate(model, *more):
    r = invoke(["generate", PROMPT, "--model", model, "--max-new-tokens", "2", *more])
    assert r.exit_code == 0, r.output
    return r


def test_one_layer_negative_or_not(smollm2):
    """--layer 5 and --layer -1 (SmolLM2 has 30 layers: -1 is 29) rank what each token read in that layer."""
    for given, shown in (("5", 5), ("-1", 29)):
        doc = json.loads(generate(smollm2, "--format", "json", "--layer", given).stdout)
        assert doc["attention_of"].startswith(f"layer {shown}, ") and doc["layers"] == [shown]
    assert_one_line_error(invoke(["generate", PROMPT, "--model", smollm2, "--layer", "30"]), "30 layers")


def test_several_layers_as_a_comma_list_or_repeated(smollm2, tmp_path):
    """--layer 5,-1 and --layer 5 --layer -1 alike: one ranking per layer, each the layer's own weights (the NPZ's
    step_attentions averaged over the heads)."""
    npz = tmp_path / "gen.npz"
    comma = json.loads(generate(smollm2, "--format", "json", "--layer", "5,-1", "--save-npz", str(npz)).stdout)
    repeated = json.loads(generate(smollm2, "--format", "json", "--layer", "5", "--layer", "-1").stdout)
    comma.pop("timing"), repeated.pop("timing")  # the machine's
    assert comma == repeated and comma["layers"] == [5, 29]
    w = np.load(npz)["step_attentions"].astype(np.float64)  # (steps, L, tau, n_max)
    for step in comma["steps"]:
        for layer in (5, 29):
            row = w[step["step"], layer].mean(axis=0)
            ranked = step["attended_by_layer"][str(layer)]
            assert [a["position"] for a in ranked] == list(np.argsort(-row[: step["position"]], kind="stable")[:3])
            assert [a["weight"] for a in ranked] == pytest.approx([row[a["position"]] for a in ranked], abs=1e-6)
        assert step["attended"] == step["attended_by_layer"]["5"]  # the first layer given
    table = generate(smollm2, "--layer", "5,-1").stdout
    assert "layer 5" in table and "layer 29" in table
    csv = generate(smollm2, "--layer", "5,-1", "--format", "csv").stdout.splitlines()
    assert csv[0].endswith("attended_layer5,attended_layer29")


def test_npz_has_the_labels_json_shows_beside_the_raw_tokens(smollm2, tmp_path):
    """`tokens` are the tokenizer's strings (Ġcat: byte-level BPE marks a leading space with Ġ); `labels` are what
    the tables and the JSON show (cat), in the NPZ too."""
    npz = tmp_path / "run.npz"
    r = invoke(["run", PROMPT, "--model", smollm2, "--layer", "0", "--format", "json", "--save-npz", str(npz)])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    z = np.load(npz, allow_pickle=False)
    assert list(z["tokens"]) == doc["tokens"] and "Ġcat" in doc["tokens"]
    assert list(z["labels"]) == doc["labels"] and "cat" in doc["labels"] and "Ġcat" not in doc["labels"]
    gen = tmp_path / "gen.npz"
    doc = json.loads(generate(smollm2, "--format", "json", "--save-npz", str(gen)).stdout)
    z = np.load(gen, allow_pickle=False)
    assert list(z["labels"]) == doc["prompt"] + [s["token"] for s in doc["steps"]]
    assert "Ġcat" in list(z["tokens"]) and len(z["tokens"]) == len(z["labels"])


def test_the_first_token_sink_is_said_and_can_be_left_out(smollm2):
    """On SmolLM2 the last layer puts most weight on the first token at every step: the table says so and points
    to --exclude-first, which ranks the tokens after it."""
    plain = " ".join(generate(smollm2).stdout.split())  # the note wraps at the terminal's width
    assert "--exclude-first ranks the tokens after it" in plain and "The@0" in plain
    after = " ".join(generate(smollm2, "--exclude-first").stdout.split())
    assert "--exclude-first ranks" not in after and "The@0" not in after and "after the first token" in after
