"""llama.cpp's `phi3` GGUF files against transformers on the same weights: tiny Phi-3 models of support/decoders.py
(a window of 5; LongRoPE over 3/4 of each head with original_max_position_embeddings 8; as Phi-4-mini, LongRoPE
and a tied output head) written by tests/support/gguf_convert_phi3.py, which follows llama.cpp's Phi3MiniModel (attn_qkv
and ffn_up fused as they are, rope_factors_short / rope_factors_long, rope.scaling.attn_factor). qkv reads the file;
every layer's attention equals transformers' eager attention within 1e-5 in float32 (1e-10 in float64) for texts
within the original context (short factors) and beyond it (long factors), and greedy generation across the switch
writes transformers' ids. Bad phi3 keys are one line (QkvError, exit 2) before any weight is read."""

from __future__ import annotations

import copy
import json
import math

import numpy as np
import pytest
from decoders import (
    build,
    check_float32,
    check_float64,
    check_greedy,
    ids_for,
)
from gguf_convert import write_vocab
from gguf_convert_phi3 import convert
from helpers import reference_import
from typer.testing import CliRunner

from qkv_cli.cli import app
from qkv_cli.errors import QkvError
from qkv_cli.models import load_model
from qkv_cli.models.formats.gguf.reader import read_gguf

pytestmark = pytest.mark.reference
# case -> (support/decoders.py case, attn_q/attn_k/attn_v apart, text lengths: within and beyond the original context)
CASES = {
    "phi3": ("phi3", False, (1, 7, 19)),  # window 5, plain RoPE
    "phi3-longrope": ("phi3-longrope", False, (5, 8, 9, 19)),  # original 8
    "phi3-tied": ("phi3-tied", False, (7, 12, 13, 19)),  # original 12
    "phi3-split": ("phi3-longrope", True, (8, 19)),
}
SHORT, LONG = np.float32([1.0, 1.3, 2.0]), np.float32([1.5, 4.0, 9.0])  # phi3-longrope's, as the file holds them


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    torch, transformers, gguf = (reference_import(x) for x in ("torch", "transformers", "gguf"))
    models, out = {}, {}

    def get(case):
        if case not in out:
            name, split, _ = CASES[case]
            if name not in models:
                models[name] = build(transformers, torch, name, tmp_path_factory.mktemp(name))
            path = tmp_path_factory.mktemp("gguf") / f"{case}.gguf"
            convert(gguf, models[name], path, split)
            out[case] = (path, models[name])
        return out[case]

    return get


def test_the_file_holds_llama_cpps_layout_and_qkv_reads_longrope_back(files):
    path, model = files("phi3-longrope")
    g = read_gguf(path)
    meta = g.metadata
    assert (meta["phi3.rope.dimension_count"], meta["phi3.rope.scaling.original_context_length"]) == (6, 8)
    assert meta["phi3.attention.sliding_window"] == 0 and "phi3.rope.scaling.type" not in meta
    assert meta["phi3.rope.scaling.attn_factor"] == pytest.approx(math.sqrt(1 + math.log(32 / 8) / math.log(8)))
    assert tuple(g.tensors["blk.0.attn_qkv.weight"].shape) == (64, 32)  # (4 + 2 * 2) heads of 8
    assert tuple(g.tensors["blk.0.ffn_up.weight"].shape) == (96, 32)  # gate and up, 48 rows each
    assert "blk.0.attn_q.weight" not in g.tensors and "blk.0.ffn_gate.weight" not in g.tensors
    np.testing.assert_array_equal(g.tensors["rope_factors_long.weight"].read(), np.float32([1.5, 4.0, 9.0]))
    ours = load_model(path, dtype="float64")
    c, r = ours.config, ours.config.rope.of("", 0)
    assert (c.family, c.d_k, r.kind, r.rot, r.original_max_positions) == ("phi3", 8, "longrope", 6, 8)
    assert (r.short_factor, r.long_factor) == (tuple(float(f) for f in SHORT), tuple(float(f) for f in LONG))
    assert r.attention_factor is None  # the stored float32 value is transformers' own: computed again exactly
    assert c.attention.sliding_window is None and not c.embeddings.tied
    W = model.state_dict()["model.layers.1.mlp.gate_up_proj.weight"].numpy()
    np.testing.assert_array_equal(ours.params.blocks[1].gate.W, W[:48])
    np.testing.assert_array_equal(ours.params.blocks[1].up.W, W[48:])
    r = CliRunner().invoke(app, ["shapes", "--model", str(path), "--format", "json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert (doc["rotary_dims"], doc["longrope_switch"]) == (6, 8)


def test_the_window_and_the_tied_head_read_from_the_file(files):
    window = load_model(files("phi3")[0]).config
    assert window.attention.sliding_window == 5 and set(window.attention.layer_types) == {"sliding_attention"}
    assert window.rope.of("", 0).kind == "default" and window.rope.of("", 0).rot == 8
    tied = load_model(files("phi3-tied")[0]).config
    assert tied.embeddings.tied and tied.rope.of("", 0).rot == 6 and tied.attention.sliding_window is None


@pytest.mark.parametrize("case", list(CASES))
def test_float32_attention_and_logits_match_transformers(case, files, torch):
    check_float32(torch, *files(case), CASES[case][2])


def test_the_long_factors_apply_beyond_the_original_context(files):
    """9 tokens (original 8): every position turns by the long factors, so even the first 8 rows differ from the
    8-token text's (short factors), by far more than float32 rounding."""
    ours = load_model(files("phi3-longrope")[0], dtype="float32")
    ids = ids_for(9, 9)
    short, long = ours.forward(ids[:8]).attentions, ours.forward(ids).attentions[:, :, :8, :8]
    assert np.abs(short - long).max() > 1e-2


def as_stored(model):
    """The model with its LongRoPE factors as the file holds them (F32: 1.3 is 1.2999999523...)."""
    out = copy.deepcopy(model)
    rope = out.config.rope_parameters
    for key in ("short_factor", "long_factor"):
        if key in rope:
            rope[key] = [float(np.float32(f)) for f in rope[key]]
    return out


@pytest.mark.parametrize("case", ["phi3-longrope", "phi3"])
def test_float64_attention_matches_a_float64_transformers(case, files, torch, transformers):
    path, model = files(case)
    check_float64(torch, transformers, path, as_stored(model), (8, 19))


@pytest.mark.parametrize("case,m", [("phi3-longrope", 5), ("phi3-tied", 9), ("phi3", 6)])
def test_greedy_generation_from_the_file_writes_transformers_ids(case, m, files, torch):
    """Prompts within the original context generating 12 tokens past it (the long factors from the switch on)."""
    check_greedy(torch, *files(case), m)


def rewritten(gguf, path, out, keys: dict, factors: dict) -> None:
    """The phi3 keys of `path` (ints and floats) with `keys` over them, its vocabulary, and only the factor tensors
    `factors` (name -> array): no weights, so an error about them proves nothing else was read first."""
    g = read_gguf(path)
    w = gguf.GGUFWriter(str(out), "phi3")
    for key, value in ({k: v for k, v in g.metadata.items() if k.startswith("phi3.")} | keys).items():
        if isinstance(value, bool) or not isinstance(value, int | float):
            continue
        (w.add_uint32 if isinstance(value, int) else w.add_float32)(key, value)
    write_vocab(w)
    for name, x in factors.items():
        w.add_tensor(name, x)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


BAD = {
    "length": ({}, {"rope_factors_short.weight": SHORT[:2], "rope_factors_long.weight": LONG},
               "'rope_factors_short.weight' is F32 [2]: expected F32 or F16 [3]"),
    "one": ({}, {"rope_factors_long.weight": LONG}, "needs 'rope_factors_short.weight' too"),
    "negative": ({}, {"rope_factors_short.weight": -SHORT, "rope_factors_long.weight": LONG},
                 "holds -1.0: every LongRoPE factor must be finite and positive"),
    "rot": ({"phi3.rope.dimension_count": 7}, {}, "phi3.rope.dimension_count is 7: expected an even number"),
    "attn": ({"phi3.rope.scaling.attn_factor": -1.0}, {"rope_factors_short.weight": SHORT,
                                                       "rope_factors_long.weight": LONG},
             "attn_factor is -1.0: expected a positive number"),
    "original": ({"phi3.rope.scaling.original_context_length": 0}, {}, "original_context_length is 0"),
}  # fmt: skip


@pytest.mark.parametrize("bad", list(BAD))
def test_bad_phi3_keys_are_one_line_exit_2_before_weights(bad, files, tmp_path):
    import gguf

    keys, factors, fragment = BAD[bad]
    out = tmp_path / "bad.gguf"
    rewritten(gguf, files("phi3-longrope")[0], out, keys, factors)
    with pytest.raises(QkvError, match=fragment.replace("[", r"\[").replace("(", r"\(")) as info:
        load_model(out)
    assert "\n" not in str(info.value)
    r = CliRunner().invoke(app, ["run", "a b c", "--model", str(out)])
    assert r.exit_code == 2 and fragment in r.output and r.output.count("\n") == 1, r.output


def test_a_stored_attn_factor_other_than_transformers_is_used_as_given(files, tmp_path):
    import gguf

    out = tmp_path / "scaled.gguf"
    rewritten(gguf, files("phi3-longrope")[0], out, {"phi3.rope.scaling.attn_factor": 1.25},
              {"rope_factors_short.weight": SHORT, "rope_factors_long.weight": LONG})  # fmt: skip
    from qkv_cli.models.catalog import config_of
    from qkv_cli.models.layers.rope import inv_freq

    r = config_of(out, "scaled").rope.of("", 0)  # the metadata alone: the file has no weights
    assert r.attention_factor == 1.25 and inv_freq(r, 19)[1] == 1.25 and inv_freq(r, 3)[1] == 1.25
