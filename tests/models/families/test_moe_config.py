"""Reading a MoE family's config.json (models.families.decoder.moe): the options it builds, the tensors it asks for, and
contradictory keys refused in one line, exit 2, before a weight is read (no PyTorch needed)."""

from __future__ import annotations

import json
import math

import pytest
from typer.testing import CliRunner

from qkv_cli.cli import app
from qkv_cli.models import config_from_dict, parameter_table
from qkv_cli.models.families.registry import family_for

BASE = {"hidden_size": 16, "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 3,
        "intermediate_size": 24, "max_position_embeddings": 64, "vocab_size": 50, "rms_norm_eps": 1e-5}  # fmt: skip
FAMILIES = {
    "mixtral": {"num_local_experts": 4, "num_experts_per_tok": 2},
    "qwen3_moe": {"num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 8, "norm_topk_prob": True,
                  "mlp_only_layers": [1]},
    "olmoe": {"num_experts": 4, "num_experts_per_tok": 2},
}  # fmt: skip


def config(family: str, **changes):
    return config_from_dict({"model_type": family, **BASE, **FAMILIES[family], **changes}, "config.json")


@pytest.mark.parametrize(
    "family, experts, top_k, normalise, d_expert, dense",
    [("mixtral", 4, 2, True, 24, ()), ("qwen3_moe", 4, 2, True, 8, (1,)), ("olmoe", 4, 2, False, 24, ())],
)
def test_each_family_reads_its_own_keys(family, experts, top_k, normalise, d_expert, dense):
    o = config(family).mlp.moe
    assert (o.experts, o.top_k, o.normalise, o.d_expert, o.dense_layers) == (experts, top_k, normalise, d_expert, dense)
    assert o.router == "softmax_topk"


def test_qwen3_moe_reads_both_spellings_of_the_expert_count_and_the_sparse_step():
    c = config("qwen3_moe", num_experts=None, num_local_experts=6, mlp_only_layers=[], decoder_sparse_step=3)
    assert c.mlp.moe.experts == 6 and c.mlp.moe.dense_layers == (0, 1)  # only layer 2: (2 + 1) % 3 == 0


def test_qwen3_moe_slides_every_layer_only_with_use_sliding_window():
    on = config("qwen3_moe", use_sliding_window=True, sliding_window=5, max_window_layers=1).attention
    off = config("qwen3_moe", sliding_window=5).attention  # transformers drops the window without the switch
    assert on.layer_types == ("sliding_attention",) * 3 and on.sliding_window == 5
    assert off.layer_types == ("full_attention",) * 3 and off.sliding_window is None


def test_tensors_and_parameter_table_count_every_expert():
    c = config("qwen3_moe")
    shapes = family_for("qwen3_moe").tensor_shapes(c)
    assert shapes["layers.0.mlp.gate.weight"] == (4, 16)
    assert shapes["layers.0.mlp.experts.3.down_proj.weight"] == (16, 8)
    assert shapes["layers.1.mlp.gate_proj.weight"] == (24, 16)  # the dense layer
    assert "layers.1.mlp.gate.weight" not in shapes and "layers.0.mlp.gate_proj.weight" not in shapes
    table = parameter_table(c)
    counted = sum(p.params for p in table if p.name != "lm_head") + 50 * 16  # lm_head (untied) counted apart
    assert counted == sum(math.prod(s) for s in shapes.values()) + 50 * 16
    mixtral = family_for("mixtral").tensor_shapes(config("mixtral"))
    assert mixtral["layers.2.block_sparse_moe.experts.0.w1.weight"] == (24, 16)
    assert mixtral["layers.2.block_sparse_moe.experts.0.w2.weight"] == (16, 24)


MLA = {"q_lora_rank": 8, "kv_lora_rank": 6, "qk_nope_head_dim": 4, "qk_rope_head_dim": 4, "v_head_dim": 4,
       "head_dim": 4, "num_key_value_heads": 4}  # fmt: skip
DEEPSEEK = {**MLA, "n_routed_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 6, "n_shared_experts": 2,
            "routed_scaling_factor": 2.5, "n_group": 2, "topk_group": 1, "first_k_dense_replace": 1}  # fmt: skip


@pytest.mark.parametrize("family", ["deepseek_v3", "deepseek_v2"])
def test_deepseek_reads_its_moe_keys_into_the_shared_options(family):
    """DeepSeekMoE's keys as typed options of the shared Moe: two shared experts of 6 are one 12 wide, the first
    layer dense; V3's router renormalises and has a correction bias, V2's (greedy softmax) neither."""
    o = config_from_dict({"model_type": family, **BASE, **DEEPSEEK}, "config.json").mlp.moe
    v3 = family == "deepseek_v3"
    assert (o.experts, o.top_k, o.d_expert, o.d_shared, o.scaling, o.groups, o.top_groups, o.dense_layers) == (
        8, 2, 6, 12, 2.5, 2, 1, (0,))  # fmt: skip
    assert (o.router, o.normalise, o.correction) == (("sigmoid_groups", True, True) if v3 else
                                                     ("softmax_topk", False, False))  # fmt: skip
    no_experts = {k: v for k, v in DEEPSEEK.items() if k != "n_routed_experts"}
    assert config_from_dict({"model_type": family, **BASE, **no_experts}, "config.json").mlp.moe is None
    all_dense = config_from_dict({"model_type": family, **BASE, **DEEPSEEK, "first_k_dense_replace": 3}, "c.json")
    assert all_dense.mlp.moe is None


def test_deepseek_and_llama4_name_their_shared_experts_with_the_same_roles():
    """One shared-expert mechanism: the roles l.shared.gate/up/down (read by moe_config.weights) behind each family's
    own tensor names; DeepSeek-V3's correction bias beside its router."""
    from qkv_cli.models.families.decoder.names import tensor_names

    ds = config_from_dict({"model_type": "deepseek_v3", **BASE, **DEEPSEEK}, "config.json")
    names = tensor_names(ds)
    assert names["layers.1.mlp.shared_experts.up_proj.weight"] == ((12, 16), "1.shared.up.w")
    assert names["layers.1.mlp.shared_experts.down_proj.weight"] == ((16, 12), "1.shared.down.w")
    assert names["layers.2.mlp.gate.e_score_correction_bias"] == ((8,), "2.router.correction")
    assert names["layers.2.mlp.experts.7.gate_proj.weight"] == ((6, 16), "2.experts.7.gate.w")
    assert "layers.0.mlp.gate.weight" not in names and names["layers.0.mlp.up_proj.weight"][1] == "0.up.w"
    l4 = {"model_type": "llama4_text", **BASE, "num_local_experts": 4, "num_experts_per_tok": 1, "moe_layers": [1]}
    c4 = config_from_dict(l4, "config.json")
    names4 = family_for("llama4_text").tensor_names(c4)
    assert names4["layers.1.feed_forward.shared_expert.gate_proj.weight"] == ((24, 16), "1.shared.gate.w")
    assert names4["layers.1.feed_forward.router.weight"] == ((4, 16), "1.router.w")
    for c in (ds, c4):
        table = {p.name: p for p in parameter_table(c)}
        assert table["W_up_shared"].shape == (16, c.mlp.moe.d_shared) and table["W_up_shared"].count == 2 - (c is c4)
    assert "b_corr" in {p.name for p in parameter_table(ds)} and "b_corr" not in {p.name for p in parameter_table(c4)}


@pytest.mark.parametrize(
    "family, changes, fragment",
    [
        ("mixtral", {"num_experts_per_tok": 5}, "'num_experts_per_tok' (5) cannot exceed 'num_local_experts' (4)"),
        ("mixtral", {"num_local_experts": 0}, "'num_local_experts' must be at least 1, got 0"),
        ("mixtral", {"num_experts_per_tok": -1}, "'num_experts_per_tok' must be at least 1, got -1"),
        ("mixtral", {"num_experts_per_tok": "two"}, "'num_experts_per_tok' must be an integer"),
        ("qwen3_moe", {"num_experts": 0}, "'num_experts' must be at least 1, got 0"),
        ("qwen3_moe", {"decoder_sparse_step": 0}, "'decoder_sparse_step' must be at least 1"),
        ("qwen3_moe", {"mlp_only_layers": [7]}, "'mlp_only_layers' names a layer beyond the 3 layers"),
        ("qwen3_moe", {"norm_topk_prob": "yes"}, "'norm_topk_prob' must be"),
        ("qwen3_moe", {"moe_intermediate_size": 0}, "must be at least 1, got 0"),
        ("olmoe", {"num_experts": 2, "num_experts_per_tok": 3}, "'num_experts_per_tok' (3) cannot exceed"),
        ("olmoe", {"clip_qkv": 8.0}, "clip_qkv is not supported"),
        ("mixtral", {"num_local_experts": 100000}, "more than qkv reads"),
    ],
)
def test_contradictory_moe_keys_are_one_line_exit_2_before_weights(family, changes, fragment, tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": family, **BASE, **FAMILIES[family], **changes}))
    (tmp_path / "model.safetensors").write_bytes(b"not read")  # refused before the weights are opened
    from qkv_cli.text.tokens import BPE_PATH

    (tmp_path / "tokenizer.json").write_text(BPE_PATH.read_text())
    r = CliRunner().invoke(app, ["run", "a b c", "--model", str(tmp_path)])
    assert r.exit_code == 2 and fragment in r.output and r.output.count("\n") == 1, r.output
