"""Decoder configs as old and new files write them, and every refusal one clear line; RoPE by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest

from qkv_cli.core import rope
from qkv_cli.errors import QkvError
from qkv_cli.models import config_from_dict
from qkv_cli.models.families.registry import read_config
from qkv_cli.models.formats.config import GGUF_ONLY
from qkv_cli.models.formats.gguf.mapping import config_dict
from qkv_cli.models.formats.safetensors import Tensor
from qkv_cli.models.layers.rope import Rope, inv_freq

LLAMA = {
    "model_type": "llama",
    "hidden_size": 64,
    "num_attention_heads": 8,
    "num_key_value_heads": 2,
    "num_hidden_layers": 4,
    "intermediate_size": 96,
    "vocab_size": 100,
    "max_position_embeddings": 128,
}


def cfg(**changes):
    return config_from_dict({**LLAMA, **changes})


def test_llama_defaults_and_gqa():
    c = cfg()
    assert (c.n_heads, c.n_kv_heads, c.d_k) == (8, 2, 8)
    assert c.rope.ropes[""] == Rope(theta=10000.0, rot=8, max_positions=128, original_max_positions=128)
    assert c.attention.layer_types == ("full_attention",) * 4 and c.attention.scale == 8**-0.5


def test_old_and_new_rope_keys_agree():
    old = cfg(
        rope_theta=500000.0,
        rope_scaling={
            "type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 64,
        },
    )
    new = cfg(rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
                               "high_freq_factor": 4.0, "original_max_position_embeddings": 64})  # fmt: skip
    assert old.rope.ropes == new.rope.ropes and old.rope.ropes[""].kind == "llama3"


def test_gemma3_local_base_and_pattern_from_an_old_file():
    c = config_from_dict({**LLAMA, "model_type": "gemma3_text", "head_dim": 16, "rope_theta": 1e6,
                          "rope_local_base_freq": 1e4, "sliding_window": 8, "sliding_window_pattern": 2,
                          "rope_scaling": {"rope_type": "linear", "factor": 8.0}})  # fmt: skip
    assert c.attention.layer_types == ("sliding_attention", "full_attention") * 2
    ropes = c.rope.ropes
    assert ropes["sliding_attention"].theta == 1e4 and ropes["sliding_attention"].kind == "default"
    assert ropes["full_attention"].theta == 1e6 and ropes["full_attention"].factor == 8.0
    assert c.attention.scale == 16**-0.5 and c.embeddings.scale == math.sqrt(64) and c.norms.kind == "rms1p"


def test_neox_partial_rotary_from_rotary_pct():
    c = config_from_dict({"model_type": "gpt_neox", "hidden_size": 64, "num_attention_heads": 4,
                          "num_hidden_layers": 2, "intermediate_size": 96, "vocab_size": 100,
                          "max_position_embeddings": 64, "rotary_pct": 0.25, "rotary_emb_base": 777.0})  # fmt: skip
    assert c.rope.ropes[""].rot == 4 and c.rope.ropes[""].theta == 777.0 and c.mlp.parallel_residual


def test_qwen2_windows_follow_max_window_layers():
    c = config_from_dict({**LLAMA, "model_type": "qwen2", "use_sliding_window": True, "sliding_window": 16,
                          "max_window_layers": 2})  # fmt: skip
    assert c.attention.layer_types == ("full_attention",) * 2 + ("sliding_attention",) * 2
    assert c.attention.qkv_bias and not c.attention.o_bias
    off = config_from_dict({**LLAMA, "model_type": "qwen2", "sliding_window": 16})  # use_sliding_window false
    assert off.attention.sliding_window is None


BAD = [
    ({"model_type": "mamba"}, ["'mamba'", "llama", "gemma2", "olmo2"]),
    ({"model_type": ["llama"]}, ["'list'", "supported"]),
    ({"num_key_value_heads": 3}, ["8 query heads", "3 key/value heads"]),
    ({"num_key_value_heads": 0}, ["num_key_value_heads", "at least 1"]),
    ({"num_key_value_heads": -2}, ["num_key_value_heads", "at least 1"]),
    ({"num_attention_heads": 0}, ["num_attention_heads", "at least 1"]),
    ({"hidden_size": 60}, ["head_dim"]),
    ({"intermediate_size": "96"}, ["intermediate_size", "integer"]),
    ({"num_hidden_layers": 10**6}, ["n_layers", "at most"]),
    ({"rope_scaling": {"rope_type": "proportional", "factor": 2.0}}, ["proportional", "default, linear"]),
    ({"rope_theta": -1.0}, ["rope_theta"]),
    ({"rope_parameters": "fast"}, ["rope_parameters", "object"]),
    ({"model_type": "mistral", "sliding_window": 0}, ["sliding_window", "at least 1"]),
    ({"model_type": "gemma2", "layer_types": ["sliding_attention"]}, ["layer_types", "4 layers"]),
    ({"model_type": "gemma3_text", "use_bidirectional_attention": True}, ["bidirectional"]),
    ({"hidden_act": "swish2"}, ["swish2", "silu"]),
    # RoPE and scale values that would divide by zero, overflow or break a shape later: refused at reading
    ({"model_type": "gemma2", "query_pre_attn_scalar": 0}, ["query_pre_attn_scalar", "positive"]),
    ({"model_type": "gemma2", "query_pre_attn_scalar": -24}, ["query_pre_attn_scalar", "positive"]),
    ({"model_type": "gemma2", "final_logit_softcapping": -1.0}, ["final_logit_softcapping", "positive"]),
    ({"rope_parameters": {"rope_type": "default", "partial_rotary_factor": 2.0}}, ["partial_rotary_factor", "(0, 1]"]),
    ({"model_type": "gpt_neox", "rotary_pct": 1.5}, ["partial_rotary_factor", "(0, 1]"]),
    ({"model_type": "gpt_neox", "rotary_pct": 0}, ["partial_rotary_factor", "(0, 1]"]),
    ({"rope_scaling": {"rope_type": "llama3", "factor": 8.0, "high_freq_factor": 0}}, ["llama3", "0 < low < high"]),
    ({"rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 4.0}}, ["llama3", "0 < low < high"]),
    (
        {"rope_scaling": {"rope_type": "llama3", "factor": 8.0, "original_max_position_embeddings": -16}},
        ["original_max_position_embeddings", "at least 1"],
    ),  # fmt: skip
    (
        {"rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": -16}},
        ["original_max_position_embeddings", "at least 1"],
    ),  # fmt: skip
    ({"rope_scaling": {"rope_type": "yarn", "factor": 4.0, "mscale": "a"}}, ["RoPE parameters", "not valid"]),
    ({"rope_scaling": {"rope_type": "yarn", "factor": 4.0, "beta_fast": -1}}, ["beta_fast", "positive"]),
    ({"rope_scaling": {"rope_type": "yarn", "factor": 4.0, "mscale": 1, "mscale_all_dim": -3}}, ["mscale_all_dim"]),
    ({"rope_scaling": {"rope_type": "dynamic", "factor": 1e308}}, ["scaling factor", "1,000"]),
    ({"rope_scaling": {"rope_type": "linear", "factor": float("inf")}}, ["scaling factor"]),
    (
        {"model_type": "gemma3_text", "rope_parameters": {"sliding_attention": 5, "full_attention": {}}},
        ["rope_parameters", "each layer type"],
    ),  # fmt: skip
    # per-pair factors (a GGUF file's rope_freqs, under GGUF_ONLY): one per pair, finite, positive, unscaled
    ({GGUF_ONLY: {"freq_factors": [1, 1, 1]}}, ["3 RoPE frequency factors", "4 rotated pairs"]),
    ({GGUF_ONLY: {"freq_factors": [1, 0, 1, 1]}}, ["finite and positive", "got 0.0"]),
    ({GGUF_ONLY: {"freq_factors": [1, float("nan"), 1, 1]}}, ["finite and positive", "got nan"]),
    ({GGUF_ONLY: {"freq_factors": [1, 1, float("inf"), 1]}}, ["finite and positive", "got inf"]),
    (
        {GGUF_ONLY: {"freq_factors": [1] * 4}, "rope_scaling": {"rope_type": "llama3", "factor": 8.0}},
        ["llama3", "scale twice"],
    ),  # fmt: skip
    ({GGUF_ONLY: {"freq_factors": "fast"}}, ["RoPE parameters", "not valid"]),
]


@pytest.mark.parametrize("changes,fragments", BAD, ids=[str(i) for i in range(len(BAD))])
def test_bad_configs_are_one_line(changes, fragments):
    with pytest.raises(QkvError) as info:
        cfg(**changes)
    message = str(info.value)
    assert "\n" not in message
    for fragment in fragments:
        assert fragment in message, (fragment, message)


def test_rope_by_hand():
    """One head of 4 dims at position 2, theta = [1, 0.01]: pair (0, 2) turns by 2 rad, pair (1, 3) by 0.02."""
    freq, scaling = inv_freq(Rope(theta=10000.0, rot=4), 3)
    np.testing.assert_allclose(freq, [1.0, 0.01])
    cos, sin = rope.cos_sin(freq, 3, scaling)
    x = np.array([[[0.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0], [1.0, 2.0, 3.0, 4.0]]])  # (1 head, 3 positions, 4)
    y = rope.apply(x, cos, sin)[0, 2]
    a, b = 2.0, 0.02
    want = [1 * math.cos(a) - 3 * math.sin(a), 2 * math.cos(b) - 4 * math.sin(b),
            3 * math.cos(a) + 1 * math.sin(a), 4 * math.cos(b) + 2 * math.sin(b)]  # fmt: skip
    np.testing.assert_allclose(y, want, rtol=1e-12)


def test_partial_rotary_leaves_the_rest():
    cos, sin = rope.cos_sin(np.array([1.0]), 4)  # rot = 2 of 6 dimensions
    x = np.random.default_rng(0).standard_normal((2, 4, 6))
    y = rope.apply(x, cos, sin)
    np.testing.assert_array_equal(y[..., 2:], x[..., 2:])
    np.testing.assert_allclose(np.linalg.norm(y[..., :2], axis=-1), np.linalg.norm(x[..., :2], axis=-1))


def test_linear_and_dynamic_scaling_by_hand():
    base = inv_freq(Rope(theta=100.0, rot=4), 8)[0]
    np.testing.assert_allclose(inv_freq(Rope(theta=100.0, rot=4, kind="linear", factor=4.0), 8)[0], base / 4)
    same = inv_freq(Rope(theta=100.0, rot=4, kind="dynamic", factor=2.0, max_positions=16), 16)[0]
    np.testing.assert_allclose(same, base)  # within the trained length: no change
    grown = inv_freq(Rope(theta=100.0, rot=4, kind="dynamic", factor=2.0, max_positions=16), 32)[0]
    new_base = 100.0 * ((2.0 * 32 / 16) - 1) ** (4 / 2)  # base * ((factor m / P) - (factor - 1))^(rot / (rot - 2))
    np.testing.assert_allclose(grown, [1.0, 1.0 / new_base**0.5])


def test_frequency_factors_divide_theta_in_the_working_dtype():
    """llama.cpp's rope_freqs: pair k turns by theta_k / f_k (after linear scaling too), in float32 in float32."""
    np.testing.assert_allclose(inv_freq(Rope(theta=100.0, rot=4, freq_factors=(1.0, 4.0)), 8)[0], [1.0, 0.1 / 4])
    linear = Rope(theta=100.0, rot=4, kind="linear", factor=2.0, freq_factors=(1.0, 4.0))
    np.testing.assert_allclose(inv_freq(linear, 8)[0], [1.0 / 2, 0.1 / 2 / 4])
    f32, _ = inv_freq(Rope(theta=100.0, rot=4, freq_factors=(1.0, 4.8853207)), 8, np.float32)
    plain32, _ = inv_freq(Rope(theta=100.0, rot=4), 8, np.float32)
    assert f32.dtype == np.float32 and f32[1] == plain32[1] / np.float32(4.8853207)


GGUF_LLAMA = {"general.architecture": "llama", "llama.block_count": 2, "llama.embedding_length": 32,
              "llama.attention.head_count": 4, "llama.feed_forward_length": 48, "llama.context_length": 32,
              "llama.vocab_size": 20}  # fmt: skip


def unread(shape, kind):
    """A stored tensor whose values must not be read (its header is refused first)."""
    return Tensor(shape, kind, lambda: pytest.fail("rope_freqs was read before its shape and type were checked"), "x")


@pytest.mark.parametrize(
    "meta, tensor, message",
    [
        (GGUF_LLAMA, unread((8,), "F32"), "'rope_freqs.weight' is F32 [8]: expected F32 or F16 [4]"),
        (GGUF_LLAMA, unread((1, 4), "F32"), "'rope_freqs.weight' is F32 [1, 4]: expected F32 or F16 [4]"),
        (GGUF_LLAMA, unread((4,), "Q8_0"), "'rope_freqs.weight' is Q8_0 [4]: expected F32 or F16 [4]"),
        (GGUF_LLAMA, unread((4,), "BF16"), "is BF16 [4]"),
        ({**GGUF_LLAMA, "llama.rope.dimension_count": 1}, unread((0,), "F32"), "expected F32 or F16 [head_dim / 2]"),
        ({"general.architecture": "qwen2"}, unread((4,), "F32"), "(rope_freqs) in a qwen2 file are not supported"),
        (GGUF_LLAMA, Tensor((4,), "F32", lambda: np.array([1, 2, 0, 8], np.float32), "x"), "holds 0.0: every RoPE"),
        (GGUF_LLAMA, Tensor((4,), "F16", lambda: np.array([1, np.inf, 8, 8], np.float32), "x"), "holds inf"),
    ],
    ids=["too long", "2-D", "quantized", "bf16", "no rotated pairs", "not llama", "zero", "infinite"],
)  # fmt: skip
def test_bad_rope_freqs_are_one_line_and_checked_before_reading(meta, tensor, message):
    with pytest.raises(QkvError) as info:
        config_dict(meta, {"rope_freqs.weight": tensor}, "GGUF file 'x.gguf'")
    assert "\n" not in str(info.value) and message in str(info.value), str(info.value)


def test_rope_freqs_become_the_ropes_factors():
    stored = Tensor((4,), "F16", lambda: np.array([1, 1.5, 8, 8], np.float32), "x")
    raw = config_dict(GGUF_LLAMA, {"rope_freqs.weight": stored}, "GGUF file 'x.gguf'")
    rope = config_from_dict(raw, "x").rope.ropes[""]
    assert (rope.kind, rope.rot, rope.freq_factors) == ("default", 8, (1.0, 1.5, 8.0, 8.0))


def test_gpt_neox_has_no_grouped_heads_whatever_the_file_says():
    """GPT-NeoX's fused query_key_value holds tau heads of each; transformers ignores num_key_value_heads there."""
    c = config_from_dict({"model_type": "gpt_neox", "hidden_size": 64, "num_attention_heads": 4,
                          "num_hidden_layers": 2, "intermediate_size": 96, "vocab_size": 100,
                          "max_position_embeddings": 64, "num_key_value_heads": 2})  # fmt: skip
    assert c.n_kv_heads == 4


def test_a_gguf_vocabulary_larger_than_the_embeddings_is_refused_from_the_metadata():
    meta = {"general.architecture": "llama", "llama.block_count": 2, "llama.embedding_length": 16,
            "llama.attention.head_count": 4, "llama.feed_forward_length": 24, "llama.context_length": 32,
            "llama.vocab_size": 20, "tokenizer.ggml.tokens": [f"t{i}" for i in range(26)]}  # fmt: skip
    with pytest.raises(QkvError, match=r"26 tokens but the model embeds only 20 \(vocab_size\)"):
        config_dict(meta, {}, "GGUF file 'x.gguf'")
    meta["llama.vocab_size"] = 26
    assert config_dict(meta, {}, "GGUF file 'x.gguf'")["vocab_size"] == 26


def test_a_config_json_is_read_as_transformers_reads_it_whatever_gguf_only_keys_it_holds(tmp_path):
    """freq_factors and a W^o bias of its own come only from a GGUF file: a config.json that names them (in
    rope_scaling, which transformers ignores for these, or under the reserved key) turns and biases as transformers'."""
    import json

    raw = {**LLAMA, "rope_scaling": {"rope_type": "default", "freq_factors": [1, 2, 4, 8]},
           GGUF_ONLY: {"freq_factors": [1, 2, 4, 8], "o_bias": True}}  # fmt: skip
    (tmp_path / "config.json").write_text(json.dumps(raw))
    c = read_config(tmp_path, "x")
    assert c.rope.ropes[""].freq_factors is None and not c.attention.o_bias
    assert c.rope.ropes == cfg().rope.ropes


@pytest.mark.parametrize("names, q, o", [(("attn_q", "attn_output"), True, True), (("attn_q",), True, False),
                                         (("attn_output",), False, True), ((), False, False)])  # fmt: skip
def test_a_gguf_files_biases_are_read_each_by_its_presence(names, q, o):
    """A Qwen written as a llama file has biases on q, k and v but not on W^o; llama.cpp reads each if present."""
    tensors = {f"blk.0.{n}.bias": Tensor((4,), "F32", lambda: None, "x") for n in names}
    c = config_from_dict(config_dict(GGUF_LLAMA, tensors, "GGUF file 'x.gguf'"), "x")
    assert (c.attention.qkv_bias, c.attention.o_bias) == (q, o)
