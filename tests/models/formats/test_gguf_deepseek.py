"""llama.cpp's `deepseek2` GGUF files against transformers on the same weights: a tiny dense DeepSeek-V3 (MLA with
q.k width 12, values 6, latents 10 and 12) written by tests/support/gguf_convert_deepseek.py, which follows llama.cpp's
DeepseekV2Model (the latent as one key/value head, kv_b_proj split into attn_k_b and attn_v_b, RoPE rows as they
are). qkv reads the file; every layer's attention equals transformers' eager attention within 1e-5 in float32 and
1e-10 in float64, and the logits agree; greedy generation through the latent cache writes transformers' ids."""

from __future__ import annotations

import pytest
from decoders import (
    build,
    check_float32,
    check_float64,
    check_greedy,
)
from gguf_convert_deepseek import convert
from helpers import reference_import

from qkv_cli.errors import QkvError
from qkv_cli.models import load_model
from qkv_cli.models.formats.gguf.reader import read_gguf

pytestmark = pytest.mark.reference


CASES = ("deepseek_v3", "deepseek_v3-moe", "deepseek_v2-groups")  # dense; V3's MoE; V2's group-limited softmax


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    torch, transformers, gguf = (reference_import(x) for x in ("torch", "transformers", "gguf"))
    out = {}

    def get(name):
        if name not in out:
            folder = tmp_path_factory.mktemp(name)
            model = build(transformers, torch, name, folder)
            path = tmp_path_factory.mktemp("gguf") / f"{name}.gguf"
            convert(gguf, model, path, folder)
            out[name] = (path, model)
        return out[name]

    return get


@pytest.fixture(scope="module")
def made(files):
    return files("deepseek_v3")


def test_the_file_holds_llama_cpps_layout_and_qkv_reads_mla_back(made):
    path, model = made
    g = read_gguf(path)
    assert g.metadata["deepseek2.attention.head_count_kv"] == 1 and g.metadata["deepseek2.attention.key_length"] == 14
    assert tuple(g.tensors["blk.0.attn_k_b.weight"].shape) == (4, 10, 8)
    assert tuple(g.tensors["blk.0.attn_v_b.weight"].shape) == (4, 6, 10)
    assert "blk.0.attn_kv_b.weight" not in g.tensors
    c = load_model(path).config
    assert (c.family, c.n_kv_heads, c.d_k, c.latent.d_v, c.latent.kv_rank, c.latent.q_rank) == (
        "deepseek_v3", 4, 12, 6, 10, 12)  # fmt: skip
    assert c.latent.interleaved and c.mlp.moe is None and c.attention.scale == pytest.approx(12**-0.5)


@pytest.mark.parametrize("name", CASES)
def test_float32_attention_and_logits_match_transformers(name, files, torch):
    check_float32(torch, *files(name))


@pytest.mark.parametrize("name", CASES)
def test_float64_attention_matches_a_float64_transformers(name, files, torch, transformers):
    check_float64(torch, transformers, *files(name))


def test_greedy_generation_from_the_file_writes_transformers_ids(made, torch):
    check_greedy(torch, *made)


def test_the_moe_keys_read_from_the_metadata(files):
    """The stacked experts split back, the router's correction bias found, the router kind from the gating
    function (2, sigmoid: DeepSeek-V3; absent, softmax: DeepSeek-V2, group-limited with expert_group_count > 1)."""
    c3 = load_model(files("deepseek_v3-moe")[0]).config
    v3 = c3.mlp.moe
    assert (c3.family, v3.router, v3.experts, v3.top_k, v3.groups, v3.top_groups) == (
        "deepseek_v3", "sigmoid_groups", 8, 2, 2, 1)  # fmt: skip
    assert v3.normalise and v3.scaling == 2.5 and v3.d_shared == 8 and v3.dense_layers == (0,) and v3.correction
    c2 = load_model(files("deepseek_v2-groups")[0]).config
    v2 = c2.mlp.moe
    assert (c2.family, v2.router, v2.normalise, v2.correction, c2.latent.q_rank) == ("deepseek_v2", "softmax_groups",
                                                                                     False, False, None)  # fmt: skip


def test_an_unknown_gating_function_is_refused_in_one_line(made, tmp_path):
    import gguf

    path, _ = made
    g = read_gguf(path)
    w = gguf.GGUFWriter(str(tmp_path / "bad.gguf"), "deepseek2")
    for key, field in g.metadata.items():
        if key.startswith("deepseek2.") and isinstance(field, int) and not isinstance(field, bool):
            w.add_uint32(key, field)
    w.add_uint32("deepseek2.expert_gating_func", 3)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(QkvError, match="expert_gating_func 3 is not supported") as info:
        load_model(tmp_path / "bad.gguf")
    assert "\n" not in str(info.value)
