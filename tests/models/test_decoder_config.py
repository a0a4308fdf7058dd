"""Decoder configs as old and new files write them, and every refusal one clear line; RoPE by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest

from qkv_cli.core import rope
from qkv_cli.errors import QkvError
from qkv_cli.models import config_from_dict
from qkv_cli.models.rope import Rope, inv_freq

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
    assert c.opt("ropes")[""] == Rope(theta=10000.0, rot=8, max_positions=128, original_max_positions=128)
    assert c.opt("layer_types") == ("full_attention",) * 4 and c.opt("scale") == 8**-0.5


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
    assert old.opt("ropes") == new.opt("ropes") and old.opt("ropes")[""].kind == "llama3"


def test_gemma3_local_base_and_pattern_from_an_old_file():
    c = config_from_dict({**LLAMA, "model_type": "gemma3_text", "head_dim": 16, "rope_theta": 1e6,
                          "rope_local_base_freq": 1e4, "sliding_window": 8, "sliding_window_pattern": 2,
                          "rope_scaling": {"rope_type": "linear", "factor": 8.0}})  # fmt: skip
    assert c.opt("layer_types") == ("sliding_attention", "full_attention") * 2
    ropes = c.opt("ropes")
    assert ropes["sliding_attention"].theta == 1e4 and ropes["sliding_attention"].kind == "default"
    assert ropes["full_attention"].theta == 1e6 and ropes["full_attention"].factor == 8.0
    assert c.opt("scale") == 16**-0.5 and c.opt("embed_scale") == math.sqrt(64) and c.opt("norm") == "rms1p"


def test_neox_partial_rotary_from_rotary_pct():
    c = config_from_dict({"model_type": "gpt_neox", "hidden_size": 64, "num_attention_heads": 4,
                          "num_hidden_layers": 2, "intermediate_size": 96, "vocab_size": 100,
                          "max_position_embeddings": 64, "rotary_pct": 0.25, "rotary_emb_base": 777.0})  # fmt: skip
    assert c.opt("ropes")[""].rot == 4 and c.opt("ropes")[""].theta == 777.0 and c.opt("parallel_residual")


def test_qwen2_windows_follow_max_window_layers():
    c = config_from_dict({**LLAMA, "model_type": "qwen2", "use_sliding_window": True, "sliding_window": 16,
                          "max_window_layers": 2})  # fmt: skip
    assert c.opt("layer_types") == ("full_attention",) * 2 + ("sliding_attention",) * 2
    assert c.opt("qkv_bias") and not c.opt("o_bias")
    off = config_from_dict({**LLAMA, "model_type": "qwen2", "sliding_window": 16})  # use_sliding_window false
    assert off.opt("sliding_window") is None


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
    ({"rope_scaling": {"rope_type": "longrope", "factor": 2.0}}, ["longrope", "default, linear"]),
    ({"rope_theta": -1.0}, ["rope_theta"]),
    ({"rope_parameters": "fast"}, ["rope_parameters", "object"]),
    ({"model_type": "mistral", "sliding_window": 0}, ["sliding_window", "at least 1"]),
    ({"model_type": "gemma2", "layer_types": ["sliding_attention"]}, ["layer_types", "4 layers"]),
    ({"model_type": "gemma3_text", "use_bidirectional_attention": True}, ["bidirectional"]),
    ({"hidden_act": "swish2"}, ["swish2", "silu"]),
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
