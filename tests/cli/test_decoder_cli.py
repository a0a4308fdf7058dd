"""RoPE decoders through the CLI without PyTorch: tiny NumPy-made checkpoints (tests/support/tiny.py) with grouped-query
attention (tau=4 query heads, G=2 key/value heads), Gemma 2's sliding/full layers, scale and soft-cap."""

import json

import numpy as np
import pytest
from helpers import causal_allowed, window_allowed
from tiny import DECODERS, TINY, make_checkpoint
from typer.testing import CliRunner

from qkv_cli.cli import app

TEXT = "the cat sat on the mat"  # 6 tokens (no special tokens): longer than the window n_c = 3
M = 6
WINDOW = DECODERS["gemma2"]["sliding_window"]


def invoke(*args, columns=120):
    result = CliRunner().invoke(app, [str(a) for a in args], env={"COLUMNS": str(columns)})
    assert result.exit_code == 0, result.output
    return result.stdout


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("decoders")
    return {family: make_checkpoint(root / family, family) for family in ("gemma2", "qwen3", "llama", "olmo2")}


def grids_of(output: str) -> list[np.ndarray]:
    """The cell symbols of each grid `qkv mask` prints: the M rows after each rule line."""
    lines = output.splitlines()
    rules = [k for k, line in enumerate(lines) if set(line.strip()) == {"─"}]
    return [np.array([line.split()[-M:] for line in lines[k + 1 : k + 1 + M]]) for k in rules]


def test_mask_model_shows_each_kind_of_layer_causal_plus_the_window(tiny):
    """Gemma 2's layer 0 slides (causal and the n_c most recent keys), layer 1 is full (causal only)."""
    out = invoke("mask", TEXT, "--model", tiny["gemma2"], columns=200)
    assert "layer 0 (sliding_attention)" in out and f"within the n_c={WINDOW} most recent" in out
    assert "layer 1 (full_attention)" in out
    sliding, full = grids_of(out)
    i, t = np.indices((M, M))
    expected_sliding = np.where(t > i, "C", np.where(t <= i - WINDOW, "W", "✓"))  # the rule that removes each cell
    np.testing.assert_array_equal(sliding, expected_sliding)
    np.testing.assert_array_equal(full, np.where(t > i, "C", "✓"))
    doc = json.loads(invoke("mask", TEXT, "--model", tiny["gemma2"], "--format", "json"))
    layers = {d["layer"]: d for d in doc["layers"]}
    assert (layers[0]["layer_type"], layers[0]["window"]) == ("sliding_attention", WINDOW)
    assert (layers[1]["layer_type"], layers[1]["window"]) == ("full_attention", None)
    np.testing.assert_array_equal(layers[0]["allowed"], causal_allowed(M) & window_allowed(M, WINDOW))
    np.testing.assert_array_equal(layers[1]["allowed"], causal_allowed(M))
    one = json.loads(invoke("mask", TEXT, "--model", tiny["gemma2"], "--layer", "1", "--format", "json"))
    assert one["layer"] == 1 and "layers" not in one


def test_mask_layer_help_says_what_mask_does_without_it():
    help_text = " ".join(invoke("mask", "--help", columns=200).split())
    assert "each kind of mask" in help_text and "every layer for JSON" not in help_text  # not the shared --layer's


def test_heatmap_model_view_labels_sliding_and_full_layers(tiny, tmp_path):
    out = tmp_path / "view.svg"
    invoke("heatmap", TEXT, "--model", tiny["gemma2"], "--out", out)
    svg = out.read_text(encoding="utf-8")
    assert "layer 0 (sliding)" in svg and "layer 1 (full)" in svg  # editable SVG text: the row labels


@pytest.mark.parametrize("dtype,itemsize", [("float32", 4), ("float64", 8)])
def test_shapes_model_json_counts_the_kv_cache_of_every_layer(tiny, dtype, itemsize):
    """Qwen 3's head_dim (8) is not d / tau (16 / 4): the cache is 2 (K, V) x L x G x d_k x bytes per token."""
    L, G, dk, m = TINY["L"], 2, DECODERS["qwen3"]["head_dim"], 7
    doc = json.loads(invoke("shapes", "--model", tiny["qwen3"], "--m", m, "--dtype", dtype, "--format", "json"))
    assert (doc["tau"], doc["kv_heads"], doc["d_k"], doc["layers"]) == (TINY["tau"], G, dk, L)
    assert doc["kv_cache_bytes_per_token"] == 2 * L * G * dk * itemsize
    assert doc["kv_cache_bytes"] == m * 2 * L * G * dk * itemsize
    assert doc["count"]["W_k"] == G and doc["matrices"]["W_k"] == [TINY["d"], dk]


def test_shapes_model_labels_the_per_layer_and_the_whole_model_cache(tiny):
    L, G, dk, tau = TINY["L"], 2, DECODERS["qwen3"]["head_dim"], TINY["tau"]
    out = " ".join(invoke("shapes", "--model", tiny["qwen3"], "--dtype", "float32", columns=200).split())
    whole, layer, full = 2 * L * G * dk * 4, 2 * G * dk * 4, 2 * tau * dk * 4
    assert f"= {whole:,} bytes per token over all layers" in out
    assert f"K, V cache per token and layer: {layer:,} bytes instead of {full:,}" in out
    assert f"x L={L} layers: {whole:,} instead of {L * full:,}" in out


def test_shapes_model_writes_the_families_own_scores_and_input(tiny):
    gemma = " ".join(invoke("shapes", "--model", tiny["gemma2"], columns=300).split())
    scalar, cap = DECODERS["gemma2"]["query_pre_attn_scalar"], DECODERS["gemma2"]["attn_logit_softcapping"]
    assert "S = tanh(Q K^T * scale / c) * c" in gemma and "sqrt(d_k)" not in gemma
    assert f"scale = {scalar}^-1/2 = {scalar**-0.5:.4g}, c = {cap:g}" in gemma
    assert "the layer input after its first norm (N_1); no positions added (RoPE turns Q and K)" in gemma
    doc = json.loads(invoke("shapes", "--model", tiny["gemma2"], "--format", "json"))
    assert doc["scale"] == pytest.approx(scalar**-0.5) and doc["softcap"] == cap
    llama = " ".join(invoke("shapes", "--model", tiny["llama"], columns=300).split())
    assert "S = Q K^T/sqrt(d_k)" in llama and "scores: " not in llama and "+ positions" not in llama
    assert "after its first norm (N_1); no positions added" in llama
    olmo = " ".join(invoke("shapes", "--model", tiny["olmo2"], columns=300).split())
    assert "the layer input itself (OLMo 2 has no norm before attention" in olmo and "first norm" not in olmo


def test_explain_writes_the_scale_and_soft_cap_the_layer_computes(tiny):
    scalar, cap = DECODERS["gemma2"]["query_pre_attn_scalar"], DECODERS["gemma2"]["attn_logit_softcapping"]
    gemma = invoke("explain", TEXT, "--model", tiny["gemma2"], "--layer", "0", columns=300)
    header = gemma.splitlines()[1]
    assert header.startswith("Att(Q, K, V) = Softmax(tanh(Q K^T * scale / c) * c + Mask) V")
    assert f"(scale = {scalar}^-1/2 = {scalar**-0.5:.4g}, c = {cap:g})" in header and "sqrt(d_k) +" not in header
    assert f"soft-cap: S = tanh(S / c) * c, c = {cap:g}" in gemma
    llama = invoke("explain", TEXT, "--model", tiny["llama"], columns=300)
    assert llama.splitlines()[1].startswith("Att(Q, K, V) = Softmax(Q K^T / sqrt(d_k) + Mask) V for head j=0")


def test_explain_olmo2_input_is_not_said_to_be_normed(tiny):
    """OLMo 2 norms after attention: H is the layer input itself, and the text says so."""
    from qkv_cli.pipeline.compute import compute, load_model
    from qkv_cli.pipeline.request import Request

    out = " ".join(invoke("explain", TEXT, "--model", tiny["olmo2"], "--layer", "1", columns=300).split())
    assert "the layer input itself (OLMo 2 has no norm before attention" in out and "first norm" not in out
    llama = " ".join(invoke("explain", TEXT, "--model", tiny["llama"], "--layer", "1", columns=300).split())
    assert "the layer input after its first norm (N_1)" in llama
    req = Request.of(text=TEXT, model=str(tiny["olmo2"]), layers=(1,), all_layers=True)
    run = compute(req, load_model(req))
    np.testing.assert_allclose(run.layers[1].H, run.hidden_states[1], atol=1e-12)  # H: layer 1's input, un-normed
