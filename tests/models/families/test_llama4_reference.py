"""Llama 4 (text) against transformers, beyond the shared decoder tests (tests/models/test_decoders_reference.py and
test_generate_reference.py run its cases too): chunked layers, NoPE layers and their query temperature, the
weightless QK-norm, the pairs-to-halves reordering of W^q and W^k, and bad config keys."""

from __future__ import annotations

import json

import numpy as np
import pytest
from decoders import attentions, build, ids_for, llama4_router_logits
from helpers import chunk_allowed
from typer.testing import CliRunner

from qkv_cli.cli import app
from qkv_cli.models import load_model

pytestmark = pytest.mark.reference
TEXT = "the cat sat on the mat because it was warm"


@pytest.fixture(scope="module")
def llama4(tmp_path_factory):
    """(folder, transformers model): 4 layers, 0-2 chunked RoPE layers (n_ch 5), 3 a NoPE layer (floor_scale 2)."""
    from helpers import reference_import

    folder = tmp_path_factory.mktemp("llama4")
    return folder, build(reference_import("transformers"), reference_import("torch"), "llama4_text", folder)


def copy_with(folder, tmp_path, changes: dict, weights: bool = True):
    out = tmp_path / "copy"
    out.mkdir()
    raw = json.loads((folder / "config.json").read_text())
    (out / "config.json").write_text(json.dumps(raw | changes))
    (out / "tokenizer.json").write_text((folder / "tokenizer.json").read_text())
    (out / "model.safetensors").write_bytes((folder / "model.safetensors").read_bytes() if weights else b"not read")
    return out


def test_chunked_layers_keep_their_chunk_and_the_nope_layer_every_earlier_key(llama4):
    folder, model = llama4
    ours = load_model(folder, dtype="float64")
    assert ours.config.attention.layer_types == tuple(model.config.layer_types)
    assert ours.config.rope.no_rope == (3,) and ours.config.attention.chunk_size == 5
    run = ours.forward(ids_for(17, 1), layers="all")
    outside = ~chunk_allowed(17, 5)
    i, t = np.indices((17, 17))
    for layer in range(3):
        assert (run.attentions[layer][:, outside] == 0).all() and run.layers[layer].rules.chunk == 5
        assert run.layers[layer].Q_pre_rope is not None
    nope = run.attentions[3]
    assert (nope[:, t > i] == 0).all() and (nope[:, outside & (t <= i)] > 1e-6).any()  # past its chunk
    assert run.layers[3].Q_pre_rope is None and run.layers[3].rules.chunk is None


def test_q_and_k_are_transformers_pairs_reordered_as_halves(llama4, torch):
    """W^q's rows are reordered per head, (x_2k, x_2k+1) -> (x_k, x_k+d_k/2): Q before RoPE holds transformers'
    q_proj numbers in that column order, so the weights are the same (the reference tests)."""
    folder, model = llama4
    ours = load_model(folder, dtype="float32")
    det = ours.forward(ids_for(9, 2), layers=[0]).layers[0]
    with torch.no_grad():
        q = model.model.layers[0].self_attn.q_proj(torch.tensor(np.asarray(det.H))).numpy()  # (m, tau d_k)
    q = q.reshape(9, 4, 8).transpose(1, 0, 2)  # (tau, m, d_k), pairs
    halves = np.concatenate([q[..., 0::2], q[..., 1::2]], axis=-1)
    np.testing.assert_allclose(det.Q_pre_rope, halves, atol=1e-5, rtol=0)


@pytest.mark.parametrize("key,layers", [("attn_temperature_tuning", [3]), ("use_qk_norm", [0, 1, 2])])
def test_temperature_and_qk_norm_change_the_weights_they_should(key, layers, llama4, tmp_path):
    """Turned off, the NoPE layer's temperature (floor_scale 2: the factor grows along the text) and the RoPE
    layers' L2 norm each change their own layers' weights: the exact agreement with transformers depends on them."""
    folder, _ = llama4
    ids = ids_for(19, 3)
    on = load_model(folder).forward(ids).attentions
    off = load_model(copy_with(folder, tmp_path, {key: False})).forward(ids).attentions
    for layer in range(4):
        changed = np.abs(on[layer] - off[layer]).max()
        assert (changed > 1e-3) if layer in layers or layer > min(layers) else changed == 0, (layer, changed)


def test_kernels_agree_and_the_cli_says_which_layers_are_chunked_and_nope(llama4):
    folder, _ = llama4
    model = load_model(folder, dtype="float64")
    ids = ids_for(13, 4)
    want = model.forward(ids).attentions
    for kernel in ("loop", "reference"):
        np.testing.assert_allclose(model.forward(ids, kernel=kernel).attentions, want, atol=1e-12)
    r = CliRunner().invoke(app, ["run", TEXT, "--model", str(folder), "--layer", "0", "--head", "0"])
    assert r.exit_code == 0 and "layer 0 of 0..3 (chunked_attention)" in r.output and "chunk n_ch=5" in r.output
    r = CliRunner().invoke(app, ["run", TEXT, "--model", str(folder), "--layer", "3", "--head", "0"])
    assert r.exit_code == 0 and "(full_attention) no RoPE (NoPE layer)" in r.output, r.output
    r = CliRunner().invoke(app, ["shapes", "--model", str(folder), "--format", "json"])
    doc = json.loads(r.stdout)
    assert (doc["nope_layers"], doc["chunked_layers"], doc["chunk_size"], doc["d_ff"]) == ([3], [0, 1, 2], 5, 40)


def test_mask_model_names_the_chunk_rule(llama4):
    folder, _ = llama4
    r = CliRunner().invoke(app, ["mask", TEXT, "--model", str(folder), "--format", "json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    chunked, full = doc["layers"]
    assert (chunked["layer"], full["layer"], chunked["chunk"], full["chunk"]) == (0, 3, 5, None)
    assert chunked["removed_by"][6][2] == ["chunk"] and chunked["removed_by"][2][6] == ["causal"]
    assert full["removed_by"][6][2] == [] and "chunk" not in full["counts"]
    m = chunked["m"]
    np.testing.assert_array_equal(chunked["allowed"], chunk_allowed(m, 5))
    r = CliRunner().invoke(app, ["mask", TEXT, "--model", str(folder)])
    said = " ".join(r.output.split())  # lines wrap at the terminal's width
    assert "K = chunk (n_ch=5): key in an earlier chunk" in said and "within its own chunk of n_ch=5" in said


@pytest.mark.parametrize(
    "changes,fragment",
    [
        ({"attention_chunk_size": 0}, "'attention_chunk_size' of at least 1, got 0"),
        ({"attention_chunk_size": -4}, "'attention_chunk_size' of at least 1, got -4"),
        ({"attention_chunk_size": None}, "chunked layers need an 'attention_chunk_size'"),
        ({"no_rope_layers": [1, 1, 1, 0, 1]}, "'no_rope_layers' lists 5 layers but the model has 4"),
        ({"layer_types": ["sliding_attention"] * 4}, "'layer_types' must list 'chunked_attention' or 'full_attention'"),
        ({"moe_layers": [4]}, "'moe_layers' must list distinct layers of 0..3, got [4]"),
        ({"moe_layers": None, "interleave_moe_layer_step": 0}, "'interleave_moe_layer_step' must be at least 1"),
        ({"floor_scale": 0}, "'floor_scale' must be a positive number"),
        ({"moe_layers": [1], "num_local_experts": 4, "num_experts_per_tok": 5},
         "'num_experts_per_tok' (5) must be 1 to 'num_local_experts' (4)"),
        ({"moe_layers": [1], "num_local_experts": 0}, "'num_experts_per_tok' (1) must be 1 to 'num_local_experts' (0)"),
        ({"use_qk_norm": "yes"}, "'use_qk_norm'"),
    ],
)  # fmt: skip
def test_bad_llama4_keys_are_one_line_exit_2_before_weights(changes, fragment, llama4, tmp_path):
    folder, _ = llama4
    bad = copy_with(folder, tmp_path, changes, weights=False)  # refused before the weights are opened
    r = CliRunner().invoke(app, ["run", "a b c", "--model", str(bad)])
    assert r.exit_code == 2 and fragment in r.output and r.output.count("\n") == 1, r.output


def test_float32_attention_of_a_longer_text_crossing_four_chunks(llama4, torch):
    """30 tokens: six chunks of 5, the NoPE layer's temperature up to log(16) 0.5 + 1."""
    folder, model = llama4
    ours = load_model(folder, dtype="float32")
    ids = ids_for(30, 5)
    for layer, want in enumerate(attentions(torch, model, ids)):
        np.testing.assert_allclose(ours.forward(ids).attentions[layer], want, atol=1e-5, rtol=0, err_msg=f"{layer}")


@pytest.mark.parametrize("layer,steps", [(1, ["Q_rotated", "K_rotated", "Q", "K"]), (3, ["Q_projected", "K", "Q"])])
def test_explain_redoes_the_l2_norm_and_the_temperature(layer, steps, llama4):
    """explain recomputes a RoPE layer's L2 norm after the rotation and the NoPE layer's query temperature with the
    plain formulas: the same Q, K and weights as run."""
    folder, _ = llama4
    head, common = 1, [TEXT, "--model", str(folder), "--layer", str(layer), "--format", "json"]
    run = json.loads(CliRunner().invoke(app, ["run", *common, "--show", "q,k,weights", "--head", str(head)]).stdout)
    r = CliRunner().invoke(app, ["explain", *common, "--head", str(head), "--query", "7"])
    assert r.exit_code == 0, r.output
    doc, got = json.loads(r.stdout), run["layers"][str(layer)]
    names = list(doc["steps"])
    assert names[names.index(steps[0]) : names.index(steps[0]) + len(steps)] == steps
    np.testing.assert_allclose(doc["steps"]["Q"]["matrix"], got["Q"][0], atol=1e-9)
    np.testing.assert_allclose(doc["steps"]["K"]["matrix"], got["K"][doc["kv_head"]], atol=1e-9)
    np.testing.assert_allclose(doc["steps"]["weights"]["matrix"], got["weights"][0], atol=1e-9)
    if layer == 1:  # the RoPE table shows the rotation before the norm: a rotation keeps each pair's length
        rope = doc["query"]["rope"]
        before, after = np.array(rope["q_before"]), np.array(rope["q_after"])
        half = len(rope["theta"])
        pairs = lambda x: np.hypot(x[:half], x[half:])  # noqa: E731
        np.testing.assert_allclose(pairs(before), pairs(after), rtol=1e-9)


def test_moe_layers_route_as_transformers_router_and_the_shared_expert_counts(tmp_path, torch, transformers):
    """Layers 1 and 3 of the MoE case: the k largest router logits chosen, g = sigmoid of them (transformers'
    Llama4Router, read through a forward hook); layers 0 and 2 dense; the parameter table counts every tensor."""
    model = build(transformers, torch, "llama4_text-moe", tmp_path)
    ours = load_model(tmp_path, dtype="float32")
    ids = ids_for(19, 6)
    seen = llama4_router_logits(torch, model, ids)
    assert sorted(seen) == [1, 3]
    run = ours.forward(ids)
    for l in range(4):
        if l not in seen:
            assert (run.router_top[l] == -1).all()
            continue
        values, top = torch.topk(seen[l], 2, dim=1)
        np.testing.assert_array_equal(run.router_top[l], top.numpy(), err_msg=f"layer {l}")
        np.testing.assert_allclose(run.router_weights[l], torch.sigmoid(values).numpy(), atol=1e-6, rtol=0)
        assert len({tuple(sorted(r)) for r in run.router_top[l].tolist()}) > 1  # the routing is not a formality
    r = CliRunner().invoke(app, ["shapes", "--model", str(tmp_path), "--format", "json"])
    doc = json.loads(r.stdout)
    assert doc["total_parameters"] == doc["file_parameters"] == sum(p.numel() for p in model.parameters())
