"""llama.cpp's `llama4` GGUF files against transformers on the same weights: tiny Llama 4 text models written by
support/gguf_convert_llama4.py, which follows llama.cpp's Llama4Model (no q/k rows permuted, gate_up_proj split into
ffn_gate_exps and ffn_up_exps, down_proj transposed), built with what such a file can say (llama.cpp's chunk of 8192,
floor_scale 8192, attn_scale 0.1, NoPE every 4th layer). qkv reads the file; every layer's attention equals
transformers' eager attention within 1e-5 in float32 (1e-10 in float64), the routers choose the same experts, and
greedy generation writes transformers' ids."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from decoders import (
    build,
    check_float32,
    check_float64,
    check_greedy,
    ids_for,
    llama4_router_logits,
)
from gguf_convert_llama4 import convert, expressible
from helpers import reference_import
from typer.testing import CliRunner

from qkv_cli.cli import app
from qkv_cli.errors import QkvError
from qkv_cli.models import load_model
from qkv_cli.models.formats.gguf.reader import read_gguf

pytestmark = pytest.mark.reference
LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 8, "rope_theta": 100.0}  # fmt: skip
CASES = {  # name -> (tests/support/decoders.py case, rope_parameters of the file's model)
    "moe": ("llama4_text-moe", None),  # 4 layers, MoE layers 1 and 3 (4 experts, top-2, a shared expert)
    "dense-tied-llama3": ("llama4_text-list", LLAMA3),  # 3 dense layers, tied head, head_dim 16, rope_freqs
}


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    torch, transformers, gguf = (reference_import(x) for x in ("torch", "transformers", "gguf"))
    out = {}

    def get(name):
        if name not in out:
            case, rope = CASES[name]
            model = build(transformers, torch, case, tmp_path_factory.mktemp(name))
            model = expressible(transformers, torch, model, rope)
            path = tmp_path_factory.mktemp("gguf") / f"{name}.gguf"
            convert(gguf, model, path)
            out[name] = (path, model)
        return out[name]

    return get


def test_the_file_holds_llama_cpps_layout_and_qkv_reads_llama_cpps_fixed_values(files):
    path, model = files("moe")
    g = read_gguf(path)
    assert g.metadata["llama4.interleave_moe_layer_step"] == 2 and g.metadata["llama4.feed_forward_length"] == 40
    assert g.metadata["llama4.expert_feed_forward_length"] == 48 and not any("chunk" in k for k in g.metadata)
    q = model.model.layers[0].self_attn.q_proj.weight.detach().numpy()
    np.testing.assert_array_equal(g.tensors["blk.0.attn_q.weight"].read(), q)  # not permuted
    assert tuple(g.tensors["blk.1.ffn_up_exps.weight"].shape) == (4, 48, 32)
    assert tuple(g.tensors["blk.1.ffn_down_exps.weight"].shape) == (4, 32, 48)
    assert "blk.0.ffn_gate_inp.weight" not in g.tensors
    c = load_model(path).config
    assert c.family == "llama4_text" and c.attention.layer_types == tuple(model.config.layer_types)
    assert (c.rope.no_rope, c.attention.chunk_size, c.attention.temperature, c.attention.l2_qk_norm) == (
        (3,), 8192, (8192, 0.1), True)  # fmt: skip
    assert (c.mlp.moe.experts, c.mlp.moe.top_k, c.mlp.moe.dense_layers, c.mlp.moe.d_expert, c.d_ff) == (
        4, 2, (0, 2), 48, 40)  # fmt: skip
    doc = json.loads(CliRunner().invoke(app, ["shapes", "--model", str(path), "--format", "json"]).stdout)
    assert (doc["nope_layers"], doc["chunked_layers"], doc["chunk_size"]) == ([3], [0, 1, 2], 8192)
    assert doc["total_parameters"] == doc["file_parameters"] == sum(p.numel() for p in model.parameters())
    tied = load_model(files("dense-tied-llama3")[0]).config
    assert tied.mlp.moe is None and tied.embeddings.tied and tied.rope.no_rope == ()
    factors = tied.rope.ropes[""].freq_factors
    assert factors is not None and len(factors) == 8 and max(factors) == 8.0 > min(factors)  # head_dim 16


@pytest.mark.parametrize("name", list(CASES))
def test_float32_attention_and_logits_match_transformers(name, files, torch):
    check_float32(torch, *files(name))


def test_float64_attention_matches_a_float64_transformers(files, torch, transformers):
    """The MoE case (the other's rope_freqs are F32, as llama.cpp stores them: 1e-8 from float64 factors)."""
    check_float64(torch, transformers, *files("moe"))


def test_the_routers_choose_transformers_experts(files, torch):
    """The k largest router logits (transformers' Llama4Router, read through a forward hook) and g = their sigmoid."""
    path, model = files("moe")
    ids = ids_for(19, 6)
    seen = llama4_router_logits(torch, model, ids)
    run = load_model(path, dtype="float32").forward(ids)
    assert sorted(seen) == [1, 3]
    for l in seen:
        values, top = torch.topk(seen[l], 2, dim=1)
        np.testing.assert_array_equal(run.router_top[l], top.numpy(), err_msg=f"layer {l}")
        np.testing.assert_allclose(run.router_weights[l], torch.sigmoid(values).numpy(), atol=1e-6, rtol=0)
        assert len({tuple(sorted(r)) for r in run.router_top[l].tolist()}) > 1  # the routing is not a formality
    assert (run.router_top[0] == -1).all() and (run.router_top[2] == -1).all()


@pytest.mark.parametrize("name", list(CASES))
def test_greedy_generation_from_the_file_writes_transformers_ids(name, files, torch):
    check_greedy(torch, *files(name))


def rewritten(gguf, source, out, changes: dict):
    """A copy of the metadata of `source` (no tensors: nothing to read) with `changes` (key -> value, None drops it)."""
    meta = read_gguf(source).metadata
    w = gguf.GGUFWriter(str(out), "llama4")
    for key, value in (meta | changes).items():
        if key in ("general.architecture", "GGUF.version") or value is None:
            continue
        if isinstance(value, bool):
            w.add_bool(key, value)
        elif isinstance(value, int):
            w.add_uint32(key, value)
        elif isinstance(value, float):
            w.add_float32(key, value)
        elif isinstance(value, str):
            w.add_string(key, value)
        else:
            w.add_array(key, [v.item() if hasattr(v, "item") else v for v in value])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return out


@pytest.mark.parametrize(
    "changes,fragment",
    [
        ({"llama4.attention.sliding_window": 0}, "llama4.attention.sliding_window 0 (every layer full attention"),
        ({"llama4.interleave_moe_layer_step": None}, "llama4.interleave_moe_layer_step is absent"),
        ({"llama4.expert_count": 0}, "llama4.expert_count is 0: llama.cpp needs an integer of at least 1"),
        ({"llama4.expert_feed_forward_length": 2.5}, "llama4.expert_feed_forward_length is 2.5"),
        ({"llama4.rope.dimension_count": 4}, "llama4.rope.dimension_count is 4, not the head width 8"),
        ({"llama4.rope.dimension_count": [8, 8]}, "llama4.rope.dimension_count is a ndarray, not the head"),
        ({"llama4.rope.freq_base_swa": 10.0}, "llama4.rope.freq_base_swa is 10.0: a RoPE base of the chunked"),
        ({"llama4.attention.sliding_window": "8192"}, "llama4.attention.sliding_window is '8192': expected an"),
        ({"llama4.attention.sliding_window_pattern": "4"}, "sliding_window_pattern must be one period"),
    ],
)
def test_bad_llama4_keys_are_one_line_exit_2_before_weights(changes, fragment, files, tmp_path):
    import gguf

    bad = rewritten(gguf, files("moe")[0], tmp_path / "bad.gguf", changes)  # no tensors: refused before them
    with pytest.raises(QkvError, match=re.escape(fragment)) as info:
        load_model(bad)
    assert "\n" not in str(info.value)
    r = CliRunner().invoke(app, ["run", "a b c", "--model", str(bad)])
    assert r.exit_code == 2 and fragment in r.output and r.output.count("\n") == 1, r.output


@pytest.mark.parametrize(
    "changes,types,qk_norm",
    [
        ({"llama4.attention.sliding_window_pattern": 2}, ("chunked_attention", "full_attention") * 2, True),
        ({"llama4.attention.sliding_window": 4096}, ("chunked_attention",) * 3 + ("full_attention",), True),
        ({"llama4.expert_count": 128}, ("chunked_attention",) * 3 + ("full_attention",), False),
    ],
)
def test_what_llama_cpp_reads_or_fixes_from_the_keys(changes, types, qk_norm, files, tmp_path):
    """A chunked pattern of 2 (llama.cpp: layer l chunked iff l % 2 < 1); a window other than 0 leaves the chunk
    at 8192; 128 experts (Maverick) turn the QK-norm off. The NoPE layer stays every 4th. Read from the headers."""
    import gguf

    from qkv_cli.models.load import stored_tensors

    c = stored_tensors(rewritten(gguf, files("moe")[0], tmp_path / "keys.gguf", changes))[0]
    assert (c.attention.layer_types, c.attention.chunk_size, c.rope.no_rope) == (types, 8192, (3,))
    assert c.attention.l2_qk_norm is qk_norm
