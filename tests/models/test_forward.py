"""The NumPy forward pass: each layer's detail is consistent, causal where it must be, kernels agree."""

from __future__ import annotations

import json
import math
import shutil
import sys

import numpy as np
import pytest
from tiny import FAMILIES, TINY, make_checkpoint

from qkv_cli.errors import QkvError
from qkv_cli.models import config_from_dict, find_models, load_model, parameter_count, parameter_table, resolve_model

# --- forward invariants ---------------------------------------------------------------------------------


def test_layer_detail_is_consistent(tiny):
    model = load_model(tiny, dtype="float64")
    result = model.run("the cat sat on the mat and the dog ran", layers=[0, -1])
    c = model.config
    assert sorted(result.layers) == [0, c.n_layers - 1]
    for l, det in result.layers.items():
        tau, m, dk = det.Q.shape
        assert (tau, dk) == (c.n_heads, c.d_k)
        assert det.Wq.shape == (tau, c.d, dk) and det.bq.shape == (tau, dk)
        assert det.Wo.shape == (c.d, c.d) and det.bo.shape == (c.d,)
        for P, W, b in ((det.Q, det.Wq, det.bq), (det.K, det.Wk, det.bk), (det.V, det.Wv, det.bv)):
            np.testing.assert_allclose(P, det.H @ W + b[:, None, :], atol=1e-12)
        np.testing.assert_allclose(det.scores, det.Q @ det.K.transpose(0, 2, 1) * det.scale, atol=1e-12)
        z = det.scores + det.mask
        e = np.exp(z - z.max(axis=-1, keepdims=True))
        np.testing.assert_allclose(det.weights, e / e.sum(axis=-1, keepdims=True), atol=1e-12)
        np.testing.assert_allclose(det.heads, det.weights @ det.V, atol=1e-12)
        concat = det.heads.transpose(1, 0, 2).reshape(m, c.d)
        np.testing.assert_allclose(det.output, concat @ det.Wo + det.bo, atol=1e-12)
        np.testing.assert_array_equal(result.attentions[l], det.weights)
        assert det.kind == "layer" and det.model.layer == l and det.model.family == c.family
        if c.family == "bert":
            np.testing.assert_array_equal(det.H, result.hidden_states[l])
            assert not det.mask.any()
    np.testing.assert_allclose(result.attentions.sum(axis=-1), 1, atol=1e-12)


def test_gpt2_attention_is_causal(tiny_gpt2):
    result = load_model(tiny_gpt2).run("the cat sat on the mat")
    m = result.attentions.shape[-1]
    upper = np.triu(np.ones((m, m), bool), 1)
    assert np.all(result.attentions[..., upper] == 0)
    np.testing.assert_allclose(result.attentions[..., 0, 0], 1)


def test_gpt2_prefix_is_unchanged_by_later_tokens(tiny_gpt2):
    model = load_model(tiny_gpt2, dtype="float64")
    short = model.run("the cat sat")
    long = model.run("the cat sat on the mat")
    np.testing.assert_allclose(long.last_hidden_state[:3], short.last_hidden_state, atol=1e-12)


def test_loop_kernel_matches_vectorized(tiny):
    model = load_model(tiny, dtype="float64")
    text = "the cat sat on the mat"
    a = model.run(text, layers="all")
    b = model.run(text, layers="all", kernel="loop")
    assert b.kernel == "loop"
    np.testing.assert_allclose(a.attentions, b.attentions, atol=1e-13)
    np.testing.assert_allclose(a.last_hidden_state, b.last_hidden_state, atol=1e-12)


def test_float32_close_to_float64(tiny):
    text = "the cat sat on the mat"
    a = load_model(tiny, dtype="float32").run(text)
    b = load_model(tiny, dtype="float64").run(text)
    assert a.last_hidden_state.dtype == np.float32 and b.last_hidden_state.dtype == np.float64
    np.testing.assert_allclose(a.attentions, b.attentions, atol=1e-5)
    np.testing.assert_allclose(a.last_hidden_state, b.last_hidden_state, atol=1e-4)


def test_unknown_kernel(tiny_bert):
    with pytest.raises(QkvError, match="unknown kernel"):
        load_model(tiny_bert).run("the cat", kernel="nope")


@pytest.mark.parametrize(
    ("layers", "message"), [(2, "layer 2 does not exist"), (-3, "layer -3"), ("last", "'all'"), (1.5, "integer")]
)
def test_bad_layer_selection(tiny_bert, layers, message):
    with pytest.raises(QkvError, match=message):
        load_model(tiny_bert).run("the cat", layers=layers)


def test_only_the_layers_asked_for_keep_their_detail(tiny_bert):
    result = load_model(tiny_bert).run("the cat", layers=0)
    assert list(result.layers) == [0] and result.layers[0].model.layer == 0
    assert result.first_layer() is result.layers[0]
    assert load_model(tiny_bert).run("the cat").layers == {}  # no layers asked: none kept


def test_forward_on_ids_checks_range(tiny_bert):
    model = load_model(tiny_bert)
    assert model.forward([1, 5, 2]).labels == ["1", "5", "2"]  # ids alone: the ids label the tokens
    with pytest.raises(QkvError, match="token ids must be in"):
        model.forward([1, 500, 2])


def test_empty_text(tiny_bert):
    with pytest.raises(QkvError, match="no tokens"):
        load_model(tiny_bert).run("   ")


@pytest.mark.parametrize("family", FAMILIES)
def test_parameter_table_counts_every_used_tensor(tmp_path, family):
    model = load_model(make_checkpoint(tmp_path / family, family))
    c = model.config
    used = sum(math.prod(s) for s in model.family.tensor_shapes(c).values())
    assert parameter_count(c) == used
    table = {p.name: p for p in parameter_table(c)}
    assert table["W_q"].shape == (c.d, c.d_k) and table["W_q"].count == c.n_layers * c.n_heads
    assert table["W_o"].shape == (c.d, c.d) and table["W_o"].count == c.n_layers
    weights = model.layer_weights(-1)
    assert weights["Wq"].shape == (c.n_heads, c.d, c.d_k)


def test_parameter_table_of_bert_base_sized_config():
    cfg = {
        "model_type": "bert",
        "hidden_size": 768,
        "num_attention_heads": 12,
        "num_hidden_layers": 12,
        "intermediate_size": 3072,
        "vocab_size": 30522,
        "max_position_embeddings": 512,
    }
    assert parameter_count(config_from_dict(cfg)) == 109_482_240 - 768 * 768 - 768  # without the pooler


def test_import_is_light():
    import subprocess

    code = "import sys, qkv_cli.models; print('numpy' in sys.modules, 'safetensors' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]


def test_copied_checkpoint_folder_loads(tmp_path, tiny_bert):
    copy = tmp_path / "copy"
    shutil.copytree(tiny_bert, copy)
    assert load_model(copy).config.family == "bert"


def test_bfloat16_weights_are_widened(tmp_path):
    import struct

    folder = make_checkpoint(tmp_path / "m", "gpt2")
    want = load_model(folder).run("the cat").last_hidden_state
    from safetensors.numpy import load_file

    tensors = load_file(str(folder / "model.safetensors"))
    header, blobs, offset = {}, [], 0
    for name, arr in tensors.items():  # float32 -> bfloat16 by truncation (exact for these values after rounding)
        arr = np.ascontiguousarray(arr)
        if arr.dtype == np.float32:
            blob, kind = (arr.view(np.uint32) >> 16).astype("<u2").tobytes(), "BF16"
        else:
            blob, kind = arr.tobytes(), {np.dtype(np.int64): "I64"}[arr.dtype]
        header[name] = {"dtype": kind, "shape": list(arr.shape), "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    (folder / "model.safetensors").write_bytes(struct.pack("<Q", len(raw)) + raw + b"".join(blobs))
    got = load_model(folder).run("the cat").last_hidden_state
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, want, atol=0.1)  # bfloat16 keeps 8 bits of mantissa


def test_unknown_safetensors_dtype(tiny_bert):
    import struct

    header = json.dumps({"w": {"dtype": "F8_E4M3", "shape": [2], "data_offsets": [0, 2]}}).encode()
    (tiny_bert / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header + b"\x00" * 2)
    with pytest.raises(QkvError, match="(dtype F8_E4M3|truncated or corrupt)"):
        load_model(tiny_bert)


def test_weights_are_memory_mapped_not_copied(tiny_bert):
    from qkv_cli.models.formats.safetensors import read_weights

    tensors = [t.read() for t in read_weights(tiny_bert).values()]
    assert all(type(t) is np.ndarray for t in tensors)
    assert not any(t.flags.owndata or t.flags.writeable for t in tensors if t.size)


def test_result_arrays_for_export(tiny_gpt2):
    from qkv_cli.views.export.results import model_arrays

    result = load_model(tiny_gpt2).run("the cat sat", layers=[1])
    arrays = model_arrays(result)
    m = len(result.tokens)
    assert arrays["attentions"].shape == (TINY["L"], TINY["tau"], m, m)
    assert arrays["layer"] == 1 and arrays["d"] == TINY["d"] and arrays["tau"] == TINY["tau"]
    assert arrays["bq"].shape == (TINY["tau"], TINY["d"] // TINY["tau"]) and arrays["bo"].shape == (TINY["d"],)
    assert list(arrays["tokens"]) == list(result.tokens.strings)
    np.testing.assert_array_equal(arrays["weights"], result.attentions[1])
    assert np.isneginf(arrays["mask"][0, 1]) and arrays["mask"][1, 0] == 0


def test_models_shipped_in_packages(tmp_path, monkeypatch):
    site = tmp_path / "lib" / "site-packages"
    make_checkpoint(site / "some_model_pkg" / "model", "gpt2")
    (site / "unrelated").mkdir()
    monkeypatch.setattr(sys, "path", [str(site)])
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    rows = find_models()
    assert [(r["name"], r["source"], r["family"]) for r in rows] == [
        ("some_model_pkg", "package", "gpt2")
    ]  # one model: the package name
    for spec in ("some_model_pkg", "some-model-pkg", "some_model_pkg/model"):
        assert resolve_model(spec) == site / "some_model_pkg" / "model"


def test_layer_output_reruns_a_layer_and_zeroes_one_value(tiny):
    model = load_model(tiny, dtype="float64")
    run = model.run("the cat sat on the mat", layers="all")
    out, weights = model.layer_output(0, run.hidden_states[0])
    np.testing.assert_allclose(out, run.hidden_states[1], atol=1e-12)
    np.testing.assert_allclose(weights, run.attentions[0], atol=1e-12)
    zeroed, same = model.layer_output(0, run.hidden_states[0], zero_value=2)
    np.testing.assert_allclose(same, weights, atol=1e-12)  # V only enters the output, never the weights
    assert np.abs(zeroed - out).max() > 1e-6
