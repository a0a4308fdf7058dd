"""The mixture-of-experts families against transformers: each MoE layer's choice of experts and their weights equal
those of transformers' own router modules (read through forward hooks), in float32 and float64; dense layers of
Qwen3-MoE route nothing. The attention, hidden states and generation are decoders' cases (support/decoders.py MOE)."""

from __future__ import annotations

import numpy as np
import pytest
from decoders import MOE, build, float64_everywhere, float64_twin, reference_routing

from qkv_cli.models import load_model

pytestmark = pytest.mark.reference


def assert_same_routing(run, want: dict, n_layers: int, atol: float):
    assert run.router_top.shape[0] == run.router_weights.shape[0] == n_layers
    for l in range(n_layers):
        if l not in want:
            assert (run.router_top[l] == -1).all() and not run.router_weights[l].any(), f"layer {l} is dense"
            continue
        top, g = want[l]
        np.testing.assert_array_equal(run.router_top[l], top, err_msg=f"layer {l}: the chosen experts")
        np.testing.assert_allclose(run.router_weights[l], g, atol=atol, rtol=0, err_msg=f"layer {l}: the weights")


@pytest.mark.parametrize("name", MOE)
def test_float32_routing_equals_transformers_routers(name, tmp_path, torch, transformers):
    model = build(transformers, torch, name, tmp_path)
    ours = load_model(tmp_path, dtype="float32")
    for seed, m in ((0, 1), (1, 8), (2, 19)):
        ids = [int(i) for i in np.random.default_rng(seed).integers(3, 1400, m)]
        want = reference_routing(torch, model, ids)
        run = ours.forward(ids)
        assert want and run.router_top.shape == (ours.config.n_layers, m, 2)
        assert_same_routing(run, want, ours.config.n_layers, 1e-5)  # as the attention: 1e-5
        # the experts are not a formality: each text routes its tokens to more than one pair
        assert len({tuple(sorted(r)) for r in run.router_top[next(iter(want))].tolist()}) > 1 or m == 1


@pytest.mark.parametrize("name", MOE)
def test_float64_routing_equals_a_float64_transformers(name, tmp_path, torch, transformers):
    model = build(transformers, torch, name, tmp_path)
    ours = load_model(tmp_path, dtype="float64")
    ids = [int(i) for i in np.random.default_rng(5).integers(3, 1400, 17)]
    with float64_everywhere(torch):
        twin = float64_twin(transformers, torch, model)
        want = reference_routing(torch, twin, ids)
        with torch.no_grad():
            logits = twin(torch.tensor([ids])).logits[0].numpy()
    run = ours.forward(ids)
    assert_same_routing(run, want, ours.config.n_layers, 1e-12)
    ours_logits = ours.family.logits(ours.params, ours.config, run.last_hidden_state)
    np.testing.assert_allclose(ours_logits, logits, atol=1e-9, rtol=1e-9)


def test_qwen3_moe_dense_layers_follow_mlp_only_layers_and_sparse_step(tmp_path, torch, transformers):
    build(transformers, torch, "qwen3_moe", tmp_path / "a")
    build(transformers, torch, "qwen3_moe-step", tmp_path / "b")
    a, b = load_model(tmp_path / "a"), load_model(tmp_path / "b")
    assert a.config.mlp.moe.dense_layers == (1,)  # mlp_only_layers [1]
    assert b.config.mlp.moe.dense_layers == (0, 2)  # decoder_sparse_step 2: layers 1 and 3 are MoE
    assert a.params.blocks[1].moe is None and a.params.blocks[0].moe is not None


@pytest.mark.parametrize("name", ["mixtral", "qwen3_moe"])
def test_experts_are_counted_and_read_with_their_layer(name, tmp_path, torch, transformers):
    model = build(transformers, torch, name, tmp_path)
    ours = load_model(tmp_path, dtype="float32")
    assert sum(p.params for p in ours.parameters()) == sum(p.numel() for p in model.parameters())
    layer0 = sum(p.numel() for n, p in model.named_parameters() if n.startswith("model.layers.0."))
    assert ours.params.blocks.layer_bytes[0] == 4 * layer0  # the experts are in the streamed layer's bytes
    ids = [int(i) for i in np.random.default_rng(3).integers(3, 1400, 12)]
    resident = ours.forward(ids)
    stream = load_model(tmp_path, dtype="float32")
    stream.fit_weights(0)  # nothing resident: each layer (its experts too) read when the pass reaches it
    assert stream.params.blocks.resident == 0
    again = stream.forward(ids)
    np.testing.assert_array_equal(again.router_top, resident.router_top)
    np.testing.assert_allclose(again.hidden_states, resident.hidden_states, rtol=0, atol=0)
