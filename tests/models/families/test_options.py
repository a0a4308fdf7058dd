"""The house of the RoPE decoders: the RoPE kinds against transformers' ROPE_INIT_FUNCTIONS (one contract test over
the registry), the typed options refusing bad values in one line, and each family's inherited protocol named."""

from __future__ import annotations

import math

import numpy as np
import pytest

from qkv_cli.errors import QkvError
from qkv_cli.models import FAMILIES, config_from_dict
from qkv_cli.models.families.registry import OPTIONAL, PROTOCOL, encoder_decoders, family_for
from qkv_cli.models.layers.choices import Attention, Embeddings, Mlp, Norms, Positions
from qkv_cli.models.layers.rope import KINDS, Rope, inv_freq

BASE = {"model_type": "llama", "hidden_size": 48, "num_attention_heads": 4, "num_key_value_heads": 2,
        "num_hidden_layers": 2, "intermediate_size": 64, "vocab_size": 100, "max_position_embeddings": 64}  # fmt: skip
HALF = 6  # rotated pairs of a 12-wide head
KIND_CASES = {  # kind -> its rope_parameters (and other config keys); texts of 8 and 100 tokens cross every context
    "default": {"rope_parameters": {"rope_type": "default", "rope_theta": 500.0}},
    "linear": {"rope_parameters": {"rope_type": "linear", "factor": 3.0, "rope_theta": 500.0}},
    "dynamic": {"rope_parameters": {"rope_type": "dynamic", "factor": 2.0, "rope_theta": 500.0}},
    "llama3": {"rope_parameters": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                   "high_freq_factor": 4.0, "original_max_position_embeddings": 16,
                                   "rope_theta": 500.0}},
    "yarn": {"rope_parameters": {"rope_type": "yarn", "factor": 4.0, "rope_theta": 500.0, "beta_fast": 16.0,
                                 "original_max_position_embeddings": 16, "mscale": 1.0, "mscale_all_dim": 0.5}},
    "longrope": {"model_type": "phi3", "original_max_position_embeddings": 16,
                 "rope_parameters": {"rope_type": "longrope", "rope_theta": 500.0, "partial_rotary_factor": 1.0,
                                     "short_factor": [1.0, 1.1, 1.3, 1.6, 2.0, 2.5],
                                     "long_factor": [1.0, 2.0, 4.0, 8.0, 12.0, 16.0]}},
}  # fmt: skip


def test_every_rope_kind_has_a_case():
    assert set(KIND_CASES) == set(KINDS)


@pytest.mark.reference
@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("m", [8, 100])
def test_rope_kind_matches_transformers_rope_init_functions(kind, m, torch, transformers):
    """inv_freq and the attention scaling of each kind, read from the config transformers writes, equal
    transformers' own function (ROPE_INIT_FUNCTIONS, or the default rotary class) at the same length."""
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    values = dict(BASE, **KIND_CASES[kind])
    model_type = values.pop("model_type")
    if model_type == "phi3":
        values["pad_token_id"] = 0
    hf = transformers.AutoConfig.for_model(model_type, **values)
    if kind == "default":
        from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

        want, want_scale = LlamaRotaryEmbedding.compute_default_rope_parameters(hf)
    else:
        want, want_scale = ROPE_INIT_FUNCTIONS[kind](hf, None, seq_len=m)
    try:
        c = config_from_dict(hf.to_dict())
    except QkvError as exc:  # phi3 before its family exists: read the same keys as llama does
        if "phi3" not in str(exc):
            raise
        c = config_from_dict(dict(hf.to_dict(), model_type="llama"))
    rope = c.rope.ropes[""]
    assert rope.kind == kind
    freq, scale = inv_freq(rope, m, np.float32)
    np.testing.assert_allclose(freq, want.numpy(), rtol=2e-7, atol=0)
    assert scale == pytest.approx(want_scale, rel=1e-12)
    freq64, _ = inv_freq(rope, m, np.float64)
    np.testing.assert_allclose(freq64, want.double().numpy(), rtol=1e-6)


def test_longrope_switches_factors_past_the_trained_context():
    rope = Rope(theta=100.0, rot=4, kind="longrope", factor=4.0, max_positions=64, original_max_positions=16,
                short_factor=(1.0, 2.0), long_factor=(3.0, 5.0))  # fmt: skip
    short, scale = inv_freq(rope, 16)
    long, _ = inv_freq(rope, 17)
    plain = 1 / 100.0 ** np.array([0, 0.5])
    np.testing.assert_allclose(short, plain / [1.0, 2.0])
    np.testing.assert_allclose(long, plain / [3.0, 5.0])
    assert scale == pytest.approx(math.sqrt(1 + math.log(4) / math.log(16)))


@pytest.mark.parametrize(
    "make,fragment",
    [
        (lambda: Attention(scale=0.0), "scale"),
        (lambda: Attention(scale=1.0, qk_norm="rows"), "QK-norm 'rows'"),
        (lambda: Attention(scale=1.0, sliding_window=0), "'sliding_window' must be at least 1"),
        (lambda: Attention(scale=1.0, layer_types=("local",)), "layer types"),
        (lambda: Attention(scale=1.0, softcap=-1.0), "attn_logit_softcapping"),
        (lambda: Mlp(bias="yes"), "true or false"),
        (lambda: Norms(kind="batch"), "norm kind 'batch'"),
        (lambda: Norms(layout="sideways"), "layout 'sideways'"),
        (lambda: Embeddings(names="t5"), "naming 't5'"),
        (lambda: Positions({}), "RoPE"),
        (lambda: Positions({"": Rope(10.0, 4)}, no_rope=(-1,)), "NoPE"),
        (lambda: Rope(10.0, 4, kind="longrope", original_max_positions=8, short_factor=(1.0,)), "short_factor"),
    ],
)
def test_options_refuse_bad_values_in_one_line(make, fragment):
    with pytest.raises(QkvError) as info:
        make()
    assert fragment in str(info.value) and "\n" not in str(info.value)


def test_options_are_frozen_and_a_misspelt_one_is_an_error():
    c = config_from_dict(BASE)
    with pytest.raises(AttributeError):
        c.attention.sliding_windw  # noqa: B018
    with pytest.raises(AttributeError):
        c.attention.scale = 1.0


@pytest.mark.parametrize("model_type", sorted(set(FAMILIES) - encoder_decoders()))
def test_every_family_resolves_the_protocol_and_names_what_it_inherits(model_type):
    family = family_for(model_type)
    base = getattr(family.module, "BASE", None)
    for name in PROTOCOL:
        if name in family.inherited:
            assert not hasattr(family.module, name) and getattr(family, name) is getattr(base, name)
        elif hasattr(family.module, name):
            assert getattr(family, name) is getattr(family.module, name)
    required = set(PROTOCOL) - set(OPTIONAL)
    assert all(hasattr(family, name) for name in required), required - set(dir(family))
    assert family.inherited == () or base is not None
