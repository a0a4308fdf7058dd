"""Every command of the CLI on a tiny random model of each newer family (support/decoders.py, built once per module by
transformers): run (table, JSON, NPZ), heatmap, view, explain, mask, heads, attribute, generate, shapes, compare and
`run --show experts`. Each test checks something the family could get wrong against transformers' config or model."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from typer.testing import CliRunner

from qkv_cli.cli import app

pytestmark = pytest.mark.reference

FAMILIES = ("gpt_oss", "mixtral", "qwen3_moe", "olmoe", "smollm3", "phi3", "deepseek_v3", "deepseek_v2", "llama4_text")
MOE = ("gpt_oss", "mixtral", "qwen3_moe", "olmoe", "deepseek_v2", "deepseek_v3-moe", "llama4_text-moe")
TEXT = "the cat sat on the mat"
LONG = "the cat sat on the mat because it was warm"  # 12 tokens: longer than every window and chunk (5)
PNG = b"\x89PNG\r\n\x1a\n"


def folder_name(case: str) -> str:
    """The folder a tiny model of case `gpt_oss` is saved as: tiny-gpt-oss (as docs/families.md names it)."""
    return "tiny-" + case.replace("_", "-")


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """case -> (folder, transformers model), each built once, side by side in one folder (the docs' `tiny-...`)."""
    from decoders import build
    from helpers import reference_import

    torch, transformers = reference_import("torch"), reference_import("transformers")
    root, out = tmp_path_factory.mktemp("families"), {}

    def get(case):
        if case not in out:
            out[case] = (root / folder_name(case), build(transformers, torch, case, root / folder_name(case)))
        return out[case]

    get.root = root
    return get


def qkv(*args) -> str:
    r = CliRunner().invoke(app, [str(a) for a in args])
    assert r.exit_code == 0, r.output
    return r.stdout


def config(folder) -> dict:
    return json.loads((folder / "config.json").read_text())


def ids_of(folder, text: str) -> list[int]:
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(folder / "tokenizer.json")).encode(text).ids


def tokens_of(folder, text: str) -> list[str]:
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(folder / "tokenizer.json")).encode(text).tokens


@pytest.mark.parametrize("case", FAMILIES)
def test_run_table_names_the_family_and_its_layer(models, case):
    folder, _ = models(case)
    c = config(folder)
    out = qkv("run", TEXT, "--model", folder, "--layer", 1)
    header = out.splitlines()[0]
    assert header.startswith(f"{folder.name} ({c['model_type']}) layer 1 of 0..{c['num_hidden_layers'] - 1}"), out
    assert f"tau={c['num_attention_heads']}" in out and "Per-head summary" in out
    if case == "smollm3":  # no_rope_layer_interval 2: layers 1 and 3 run without RoPE
        assert "no RoPE (NoPE layer)" in header
        assert "no RoPE" not in qkv("run", TEXT, "--model", folder, "--layer", 0).splitlines()[0]


@pytest.mark.parametrize("case", FAMILIES)
def test_run_json_holds_transformers_weights_of_every_layer(models, case, torch):
    from decoders import attentions

    folder, model = models(case)
    c = config(folder)
    doc = json.loads(qkv("run", LONG, "--model", folder, "--format", "json", "--dtype", "float32"))
    m = len(ids_of(folder, LONG))
    assert doc["ids"] == ids_of(folder, LONG) and doc["settings"]["family"] == c["model_type"]
    weights = np.array(doc["attentions"])
    assert weights.shape == (c["num_hidden_layers"], c["num_attention_heads"], m, m)
    np.testing.assert_allclose(weights, np.stack(attentions(torch, model, doc["ids"])), atol=2e-5)


@pytest.mark.parametrize("case", FAMILIES)
def test_run_saves_an_npz_with_every_layer(models, case, tmp_path):
    folder, _ = models(case)
    c = config(folder)
    qkv("run", TEXT, "--model", folder, "--save-npz", tmp_path / "run.npz")
    z = np.load(tmp_path / "run.npz")
    m = len(ids_of(folder, TEXT))
    assert z["attentions"].shape == (c["num_hidden_layers"], c["num_attention_heads"], m, m)
    rows = z["attentions"].sum(-1) + (z["sinks"] if "sinks" in z else 0)  # gpt-oss: the sink takes the rest
    np.testing.assert_allclose(rows, 1, atol=1e-9)
    assert ("sinks" in z) == (case == "gpt_oss")


@pytest.mark.parametrize("case", FAMILIES)
def test_heatmap_writes_a_png(models, case, tmp_path):
    folder, _ = models(case)
    qkv("heatmap", TEXT, "--model", folder, "--layer", 0, "--out", tmp_path / "a.png")
    data = (tmp_path / "a.png").read_bytes()
    assert data.startswith(PNG) and len(data) > 5000


@pytest.mark.parametrize("case", FAMILIES)
def test_view_writes_a_page_with_the_tokens_and_every_layer(models, case, tmp_path):
    folder, _ = models(case)
    qkv("view", TEXT, "--model", folder, "--out", tmp_path / "a.html")
    page = (tmp_path / "a.html").read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>") and folder.name in page
    data = json.loads(re.search(r'<script type="application/json" id="qkv-data">(.*?)</script>', page, re.S).group(1))
    labels = [t.removeprefix("Ġ") for t in tokens_of(folder, TEXT)]  # byte-level BPE's space mark dropped
    sentence = data["sentences"][0]
    assert sentence["tokens"] == labels and len(sentence["layers"]) == config(folder)["num_hidden_layers"]


@pytest.mark.parametrize("case", FAMILIES)
def test_explain_zooms_into_a_query(models, case, torch):
    from decoders import attentions

    folder, model = models(case)
    c = config(folder)
    args = ("explain", TEXT, "--model", folder, "--layer", 0, "--head", 1, "--query", 3)
    out = qkv(*args)
    assert "q_3" in out or "query 3" in out, out
    doc = json.loads(qkv(*args, "--format", "json"))
    weights = np.array(doc["steps"]["weights"]["matrix"])
    m = len(ids_of(folder, TEXT))
    assert weights.shape == (m, m) and np.allclose(np.triu(weights, 1), 0)  # causal
    np.testing.assert_allclose(doc["query"]["weights"], weights[3], atol=1e-12)
    want = attentions(torch, model, ids_of(folder, TEXT))[0][1]  # transformers' layer 0, head 1 (float32)
    np.testing.assert_allclose(weights, want, atol=2e-5)
    if c["model_type"].startswith("deepseek"):  # MLA: the score's content and position parts as their own steps
        assert {"c_kv", "k_rope", "scores_nope", "scores_rope"} <= doc["steps"].keys()
        S = doc["steps"]
        np.testing.assert_allclose(
            np.array(S["scores_nope"]["matrix"]) + S["scores_rope"]["matrix"], S["scores"]["matrix"], atol=1e-9
        )


@pytest.mark.parametrize("case", FAMILIES)
def test_mask_says_why_each_cell_is_gone(models, case):
    folder, _ = models(case)
    c = config(folder)
    out = qkv("mask", LONG, "--model", folder, "--layer", 0)
    assert "C = causal" in out
    window = c.get("sliding_window") if case in ("gpt_oss", "mixtral", "phi3") else None  # layer 0 slides
    assert (f"W = window (n_c={window})" in out) == bool(window), out
    assert ("K = chunk (n_ch=5)" in out) == (case == "llama4_text"), out


@pytest.mark.parametrize("case", FAMILIES)
def test_heads_has_a_row_per_layer_and_head(models, case):
    folder, _ = models(case)
    c = config(folder)
    heads = json.loads(qkv("heads", TEXT, "--model", folder, "--format", "json"))["heads"]
    L, tau = c["num_hidden_layers"], c["num_attention_heads"]
    assert [(h["layer"], h["head"]) for h in heads] == [(l, j) for l in range(L) for j in range(tau)]
    assert all(0 <= h["entropy"] <= np.log(len(ids_of(folder, TEXT))) + 1e-9 for h in heads)


@pytest.mark.parametrize("method", ["value-norm", "rollout"])
@pytest.mark.parametrize("case", FAMILIES)
def test_attribute(models, case, method):
    folder, _ = models(case)
    doc = json.loads(qkv("attribute", TEXT, "--model", folder, "--method", method, "--format", "json"))
    m = len(ids_of(folder, TEXT))
    a = np.array(doc["attribution"])
    assert doc["layer"] == config(folder)["num_hidden_layers"] - 1 and a.shape == (m, m)
    assert np.all(np.isfinite(a)) and np.allclose(np.triu(a, 1), 0) and a.max() > 0
    if method == "rollout":  # rows of a product of row-stochastic matrices
        np.testing.assert_allclose(a.sum(-1), 1, atol=1e-9)


@pytest.mark.parametrize("case", FAMILIES)
def test_generate_writes_two_tokens(models, case, tmp_path, torch):
    folder, model = models(case)
    prompt = ids_of(folder, TEXT)
    doc = json.loads(qkv("generate", TEXT, "--model", folder, "--max-new-tokens", 2, "--format", "json", "--quiet"))
    assert len(doc["steps"]) == 2 and len(doc["prompt"]) == len(prompt)
    qkv("generate", TEXT, "--model", folder, "--max-new-tokens", 2, "--quiet", "--save-npz", tmp_path / "g.npz")
    z = np.load(tmp_path / "g.npz")
    assert len(z["ids"]) == len(prompt) + 2 and list(z["ids"][: len(prompt)]) == prompt
    with torch.no_grad():  # transformers' greedy choice after the prompt
        first = int(model(torch.tensor([prompt])).logits[0, -1].argmax())
    assert z["ids"][len(prompt)] == first


def special(c: dict, doc: dict) -> None:
    """What `qkv shapes --model` must say of a family's own matrices."""
    t = c["model_type"]
    if t.startswith("deepseek"):
        kv = doc["kv_cache_numbers_per_token_layer"]
        assert (kv["latent"], kv["rope_key"]) == (c["kv_lora_rank"], c["qk_rope_head_dim"])
        assert doc["matrices"]["c_kv"][1] == c["kv_lora_rank"] and doc["matrices"]["V"][1] == c["v_head_dim"]
    if t in ("gpt_oss", "mixtral", "qwen3_moe", "olmoe"):
        assert doc["experts"] == c.get("num_local_experts", c.get("num_experts"))
        assert doc["top_k"] == c["num_experts_per_tok"]
    if t == "smollm3":
        assert doc["nope_layers"] == [1, 3]
    if t == "llama4_text":
        assert (doc["nope_layers"], doc["chunked_layers"], doc["chunk_size"]) == ([3], [0, 1, 2], 5)
    if t == "phi3":  # the fused qkv_proj and gate_up_proj split as the forward pass reads them
        assert doc["parameters"]["W_q"]["shape"] == [c["hidden_size"], c["hidden_size"] // c["num_attention_heads"]]


@pytest.mark.parametrize("case", FAMILIES)
def test_shapes_of_the_checkpoint(models, case):
    folder, model = models(case)
    c = config(folder)
    doc = json.loads(qkv("shapes", "--model", folder, "--format", "json"))
    assert doc["family"] == c["model_type"] and doc["layers"] == c["num_hidden_layers"]
    assert doc["total_parameters"] == doc["file_parameters"] == sum(p.numel() for p in model.parameters())
    special(c, doc)
    assert "Learned parameters" in qkv("shapes", "--model", folder)


@pytest.mark.parametrize("case", FAMILIES)
def test_compare_two_texts_on_one_model(models, case):
    folder, _ = models(case)
    c = config(folder)
    doc = json.loads(qkv("compare", TEXT, "the dog sat on the mat", "--model", folder, "--format", "json"))
    L, tau, m = c["num_hidden_layers"], c["num_attention_heads"], len(ids_of(folder, TEXT))
    assert doc["alignment"]["differing"] == [1]  # cat -> dog
    assert np.array(doc["weights_a"]).shape == np.array(doc["weights_b"]).shape == (L, tau, m, m)
    tv = np.array(doc["tv"])
    assert tv.shape == (L, tau) and tv.max() > 0


@pytest.mark.parametrize("case", MOE)
def test_show_experts(models, case, torch):
    from decoders import MOE as DECODERS_MOE
    from decoders import reference_routing

    folder, model = models(case)
    c = config(folder)
    experts = c.get("num_local_experts") or c.get("num_experts") or c.get("n_routed_experts")
    m = len(ids_of(folder, TEXT))
    L = c["num_hidden_layers"]
    out = qkv("run", TEXT, "--model", folder, "--show", "experts", "--layer", L - 1)
    assert f"layer {L - 1}: experts per token (weight g)" in out, out
    rows = [line.split() for line in out.splitlines() if line.split()[:1] and line.split()[0].isdigit()]
    assert [int(r[0]) for r in rows] == list(range(m))
    chosen = [int(x) for r in rows for x in r[2::2]]
    assert len(chosen) == m * c["num_experts_per_tok"] and all(0 <= e < experts for e in chosen)
    top = np.array(chosen).reshape(m, -1)
    g = np.array([float(x.strip("()")) for r in rows for x in r[3::2]]).reshape(m, -1)
    if case in DECODERS_MOE:  # transformers' router modules, read through hooks
        want_top, want_g = reference_routing(torch, model, ids_of(folder, TEXT))[L - 1]
    elif case.startswith("llama4"):  # Llama4Router's logits: the k largest, g = their sigmoid
        from decoders import llama4_router_logits

        logits = llama4_router_logits(torch, model, ids_of(folder, TEXT))[L - 1]
        values, top_ = torch.topk(logits, c["num_experts_per_tok"], dim=1)
        want_top, want_g = top_.numpy(), torch.sigmoid(values).numpy()
    else:  # DeepSeek's grouped router: the table shows the export's routing (transformers': test_mla_reference.py)
        doc = json.loads(qkv("run", TEXT, "--model", folder, "--format", "json"))
        want_top, want_g = np.array(doc["router_top"][L - 1]), np.array(doc["router_weights"][L - 1])
    np.testing.assert_array_equal(top, want_top)
    np.testing.assert_allclose(g, want_g, atol=0.005 + 1e-9)
