"""Multi-head latent attention (DeepSeek-V3) against transformers, on tiny random models it built: q.k width 12
(8 nope + 4 rope), values 6 wide, latents of 10 (keys and values) and 12 (queries). Every layer's attention and
generation: tests/models/test_decoders_reference.py and test_generate_reference.py (their CASES hold these)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from decoders import ids_for
from typer.testing import CliRunner

from qkv_cli.cli import app
from qkv_cli.models import load_model

pytestmark = pytest.mark.reference


def copy_with(folder, tmp_path, changes: dict, weights: bool = True):
    out = tmp_path / "changed"
    out.mkdir()
    raw = json.loads((folder / "config.json").read_text())
    (out / "config.json").write_text(json.dumps(raw | changes))
    (out / "model.safetensors").write_bytes((folder / "model.safetensors").read_bytes() if weights else b"not read")
    (out / "tokenizer.json").write_text((folder / "tokenizer.json").read_text())
    return out


@pytest.mark.parametrize("name", ["deepseek_v3", "deepseek_v3-yarn"])
def test_one_score_is_the_nope_part_plus_the_rope_part(name, built):
    """S = (q^C . k^C + q^R . k^R) * scale; the RoPE part of every head's keys is the one shared k^R; values are
    d_v = 6 wide while q . k is 12 wide; the kernels agree."""
    folder, _ = built(name)
    model = load_model(folder, dtype="float64")
    lt = model.config.latent
    ids = ids_for(13, 2)
    run = model.forward(ids, layers="all")
    for layer in run.layers.values():
        Q, K, V = layer.Q, layer.K, layer.V
        assert Q.shape == K.shape == (4, 13, 12) and V.shape == (4, 13, 6) and layer.heads.shape == (4, 13, 6)
        nope = Q[..., : lt.d_nope] @ K[..., : lt.d_nope].transpose(0, 2, 1)
        rope = Q[..., lt.d_nope :] @ K[..., lt.d_nope :].transpose(0, 2, 1)
        np.testing.assert_allclose(layer.scores, (nope + rope) * layer.scale, atol=1e-12)
        assert np.abs(rope).max() > 0.1 and np.abs(nope).max() > 0.1  # both parts matter
        assert (K[:, :, lt.d_nope :] == K[:1, :, lt.d_nope :]).all()  # one RoPE key for every head
    for kernel in ("loop", "reference"):
        np.testing.assert_allclose(model.forward(ids, kernel=kernel).attentions, run.attentions, atol=1e-12)


def test_the_yarn_scale_is_mscale_squared_over_sqrt_dk(built):
    import math

    folder, _ = built("deepseek_v3-yarn")
    c = load_model(folder).config
    mscale = 0.1 * 0.7 * math.log(4.0) + 1  # mscale_all_dim 0.7, factor 4
    assert c.attention.scale == pytest.approx(mscale**2 / math.sqrt(12), rel=1e-12)
    assert load_model(built("deepseek_v3")[0]).config.attention.scale == pytest.approx(12**-0.5, rel=1e-12)


def test_the_kv_cache_holds_the_latent_and_equals_a_full_forward(built):
    """Generation caches r_kv + d_rope = 14 numbers per token and layer (not 2 tau d_k); step by step it gives the
    rows of one full forward pass to rounding in float64."""
    from qkv_cli.models.cache import KVCache, bytes_needed, step
    from qkv_cli.models.layers.mla import LatentCache

    folder, _ = built("deepseek_v3")
    model = load_model(folder, dtype="float64")
    ids = ids_for(15, 3)
    full = model.forward(ids).attentions
    cache = KVCache(model, 15)
    assert all(isinstance(lc, LatentCache) for lc in cache.layers)
    step(model, ids[:6], cache)
    for t in range(6, 15):
        rows = step(model, ids[t : t + 1], cache).attentions
        for layer, row in enumerate(rows):
            np.testing.assert_allclose(row[:, 0], full[layer, :, t, : t + 1], atol=1e-12)
    assert cache.nbytes == 3 * 15 * (10 + 4) * 8 == bytes_needed(model.config, 15, 8)


def test_interleaved_rope_rows_are_read_as_deepseek_lays_them(built, tmp_path):
    """The same weights read as if rope_interleave were false turn other pairs: the attention changes."""
    folder, _ = built("deepseek_v3")
    ids = ids_for(11, 4)
    want = load_model(folder, dtype="float64").forward(ids).attentions
    flipped = load_model(copy_with(folder, tmp_path, {"rope_interleave": False}), dtype="float64")
    assert np.abs(flipped.forward(ids).attentions - want).max() > 1e-3


def test_shapes_show_the_latent_and_what_it_saves(built):
    folder, _ = built("deepseek_v3")
    r = CliRunner().invoke(app, ["shapes", "--model", str(folder), "--format", "json", "--m", "7"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["kv_cache_numbers_per_token_layer"] == {"latent": 10, "rope_key": 4, "mla": 14, "mha": 72,
                                                       "ratio": 72 / 14}  # fmt: skip
    assert doc["kv_cache_bytes_per_token"] == 3 * 14 * 8 and doc["kv_cache_bytes"] == 7 * 3 * 14 * 8
    assert doc["total_parameters"] == doc["file_parameters"]
    assert doc["matrices"]["c_kv"] == [7, 10] and doc["matrices"]["V"] == [7, 6] and doc["matrices"]["Q"] == [7, 12]
    text = " ".join(CliRunner().invoke(app, ["shapes", "--model", str(folder), "--m", "7"]).stdout.split())
    assert "14 numbers" in text and "tau x (d_k + d_v) = 4 x (12 + 6) = 72 (5.1x more)" in text


@pytest.mark.parametrize(
    "changes,fragment",
    [
        ({"q_lora_rank": 0}, "'q_lora_rank' must be a positive integer, got 0"),
        ({"kv_lora_rank": 0}, "'kv_lora_rank' must be a positive integer, got 0"),
        ({"qk_rope_head_dim": 3, "head_dim": 3}, "'qk_rope_head_dim' must be even"),
        ({"qk_rope_head_dim": 0}, "'qk_rope_head_dim' must be a positive integer, got 0"),
        ({"v_head_dim": -1}, "'v_head_dim' must be a positive integer, got -1"),
        ({"qk_head_dim": 16}, "'qk_head_dim' is 16 but the MLA widths make it 12"),
        ({"head_dim": 8}, "'head_dim' is 8 but the MLA widths make it 4"),
        ({"num_key_value_heads": 2}, "'num_key_value_heads' (2) must equal 'num_attention_heads' (4)"),
        ({"rope_interleave": "yes"}, "'rope_interleave' must be true or false"),
        ({"kv_lora_rank": None}, "missing the key 'kv_lora_rank'"),
    ],
)  # fmt: skip
def test_bad_mla_keys_are_one_line_exit_2_before_weights(changes, fragment, built, tmp_path):
    folder, _ = built("deepseek_v3")
    bad = copy_with(folder, tmp_path, changes, weights=False)
    for command in (["run", "a b c"], ["shapes"]):
        r = CliRunner().invoke(app, [*command, "--model", str(bad)])
        assert r.exit_code == 2 and fragment in r.output and r.output.count("\n") == 1, r.output


@pytest.mark.parametrize("name", ["deepseek_v3-moe", "deepseek_v2", "deepseek_v2-groups"])
def test_moe_layers_route_as_transformers(name, built, monkeypatch, torch):
    """Layers after first_k_dense_replace choose transformers' experts with its weights (V3: sigmoid scores, the
    correction bias steering the choice within the best group, renormalised, times routed_scaling_factor 2.5; V2:
    softmax scores, the k best or the k best of the best group, times the factor); the first layer is dense; V3's
    correction bias changes some choice (it is read)."""
    from qkv_cli.models.layers import moe
    from qkv_cli.models.layers.moe import route

    folder, model = built(name)
    ids = ids_for(17, 8)
    want = {}

    def keep(l):
        def hook(module, args, out):  # returns None: the output stays transformers'
            want[l] = (args[0], out)

        return hook

    hooks = [layer.mlp.gate.register_forward_hook(keep(l)) for l, layer in enumerate(model.model.layers)
             if hasattr(layer.mlp, "gate")]  # fmt: skip
    with torch.no_grad():
        model(torch.tensor([ids]))
    for h in hooks:
        h.remove()
    got = []
    plain = moe.MoeLayer.__call__  # the shared decoder's MoE layer
    monkeypatch.setattr(moe.MoeLayer, "__call__", lambda self, x, o: got.append((self, x)) or plain(self, x, o))
    ours = load_model(folder, dtype="float32")
    run = ours.forward(ids)
    assert sorted(want) == [1, 2] and len(got) == 2 and ours.params.blocks[0].moe is None
    assert (run.router_top[0] == -1).all()  # the dense first layer routes nothing
    steered = False
    for (layer, x), (l, (x_ref, (_, weights, top))) in zip(got, sorted(want.items()), strict=True):
        np.testing.assert_allclose(x, x_ref[0].numpy(), atol=1e-5, err_msg=f"layer {l}: the router's input")
        routing = route(layer.router(x), ours.config.mlp.moe, layer.correction)
        order = np.argsort(top.numpy(), axis=1)  # transformers' top-k is unsorted: compare as sets
        np.testing.assert_array_equal(np.sort(routing.top, axis=1), np.take_along_axis(top.numpy(), order, 1))
        np.testing.assert_array_equal(run.router_top[l], routing.top)  # what --show experts and exports hold
        mine = np.take_along_axis(routing.weights, np.argsort(routing.top, axis=1), 1)
        np.testing.assert_allclose(mine, np.take_along_axis(weights.numpy(), order, 1), atol=1e-5)
        if name == "deepseek_v3-moe":
            np.testing.assert_allclose(routing.weights.sum(axis=1), 2.5, rtol=1e-5)
            unsteered = route(layer.router(x), ours.config.mlp.moe).top
            steered |= bool((np.sort(unsteered, 1) != np.sort(routing.top, 1)).any())
    assert steered == (name == "deepseek_v3-moe")


@pytest.mark.parametrize("name", ["deepseek_v3", "deepseek_v3-yarn"])
def test_explain_shows_the_nope_and_rope_parts_of_a_score(name, built):
    """explain recomputes the latents, Q, K, V from H with the plain formulas; S = S^C + S^R, and one query's
    q . k_t = q^C . k^C + q^R . k^R for each key; RoPE turns the last d_rope dimensions only."""
    folder, _ = built(name)
    common = ["the cat sat on the mat", "--model", str(folder), "--layer", "2", "--format", "json", "--head", "3"]
    run = json.loads(CliRunner().invoke(app, ["run", *common, "--show", "q,k,v,weights"]).stdout)["layers"]["2"]
    r = CliRunner().invoke(app, ["explain", *common, "--query", "4"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    steps = {k: np.array(v["matrix"], dtype=float) for k, v in doc["steps"].items()}
    np.testing.assert_allclose(steps["Q"], run["Q"][0], atol=1e-9)  # --head 3: the run keeps its queries
    for x in ("K", "V"):  # and every head's keys and values
        np.testing.assert_allclose(steps[x], run[x][doc["kv_head"]], atol=1e-9, err_msg=x)
    assert steps["V"].shape[1] == 6 and steps["c_kv"].shape[1] == 10 and steps["k_rope"].shape[1] == 4
    assert ("c_q" in steps) == (name == "deepseek_v3")  # the yarn case has no query latent (q_lora_rank null)
    np.testing.assert_allclose(steps["scores_nope"] + steps["scores_rope"], steps["scores"], atol=1e-12)
    np.testing.assert_allclose(steps["weights"], run["weights"][0], atol=1e-9)
    z = doc["query"]
    np.testing.assert_allclose(np.add(z["dot_nope"], z["dot_rope"]), z["dot"], atol=1e-12)
    assert z["rope"]["pairs"] == [[8, 10], [9, 11]]
    np.testing.assert_array_equal(steps["Q"][:, :8], steps["Q_pre_rope"][:, :8])
    table = ["explain", "the cat sat on the mat", "--model", str(folder), "--layer", "2"]
    zoomed = CliRunner().invoke(app, [*table, "--query", "4"]).stdout
    assert "q^C . k^C" in zoomed and "+ q^R . k^R" in zoomed
    walk = " ".join(CliRunner().invoke(app, table).stdout.split())
    assert "S^C = Q^C K^C^T * scale: the nope part" in walk and "S = S^C + S^R = Q^[0] K^[0]^T * scale" in walk


@pytest.mark.parametrize(
    "name,changes,fragment",
    [
        ("deepseek_v3-moe", {"num_experts_per_tok": 9}, "(9) cannot exceed 'n_routed_experts' (8)"),
        ("deepseek_v3-moe", {"n_routed_experts": 0}, "'n_routed_experts' must be at least 1, got 0"),
        ("deepseek_v3-moe", {"n_shared_experts": -1}, "'n_shared_experts' must be at least 0, got -1"),
        ("deepseek_v3-moe", {"n_group": 3}, "the experts (8) must split evenly into n_group (3) groups"),
        ("deepseek_v3-moe", {"topk_group": 3}, "topk_group (3) cannot exceed n_group (2)"),
        ("deepseek_v3-moe", {"routed_scaling_factor": 0}, "routed_scaling_factor must be a positive number"),
        ("deepseek_v2", {"topk_method": "noaux_tc"}, "'topk_method' 'noaux_tc' is not supported"),
    ],
)  # fmt: skip
def test_bad_moe_keys_are_one_line_exit_2_before_weights(name, changes, fragment, built, tmp_path):
    folder, _ = built(name)
    bad = copy_with(folder, tmp_path, changes, weights=False)
    r = CliRunner().invoke(app, ["run", "a b c", "--model", str(bad)])
    assert r.exit_code == 2 and fragment in r.output and r.output.count("\n") == 1, r.output


def test_show_experts_and_the_json_routing_are_transformers_choice(built, torch):
    """`--show experts` and `--format json` on DeepSeek-V3's MoE layers: transformers' experts (as sets: its top-k is
    unsorted) with weights summing to routed_scaling_factor 2.5; the dense first layer says so and routes nothing."""
    folder, model = built("deepseek_v3-moe")
    text = "the cat sat on the mat"
    ours = load_model(folder, dtype="float32")
    ids = list(ours.tokenize(text).ids)
    seen = {}
    hooks = [layer.mlp.gate.register_forward_hook(lambda mod, args, out, l=l: seen.__setitem__(l, out[2].numpy()))
             for l, layer in enumerate(model.model.layers) if hasattr(layer.mlp, "gate")]  # fmt: skip
    with torch.no_grad():
        model(torch.tensor([ids]))
    for h in hooks:
        h.remove()
    common = ["run", text, "--model", str(folder), "--dtype", "float32"]
    doc = json.loads(CliRunner().invoke(app, [*common, "--format", "json"]).stdout)
    top, g = np.array(doc["router_top"]), np.array(doc["router_weights"])
    assert sorted(seen) == [1, 2] and (top[0] == -1).all() and not g[0].any()
    for l in (1, 2):
        np.testing.assert_array_equal(np.sort(top[l], 1), np.sort(seen[l], 1), err_msg=f"layer {l}")
        np.testing.assert_allclose(g[l].sum(1), 2.5, rtol=1e-5)
    r = CliRunner().invoke(app, [*common, "--show", "experts", "--layer", "0,2"])
    assert r.exit_code == 0 and "layer 0: a dense MLP (no experts)" in r.output, r.output
    for i in range(len(ids)):  # the row of token i: its two experts with their weights, in the biased choice's order
        assert f"{top[2, i, 0]} ({g[2, i, 0]:.2f})   {top[2, i, 1]} ({g[2, i, 1]:.2f})" in r.output
