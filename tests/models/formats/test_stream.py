"""The streamed forward (formats.stream): layers read as the pass reaches them give the same numbers as layers kept
resident, the embedding and the head are read by rows, and the budget decides how many layers stay."""

from __future__ import annotations

import numpy as np
import pytest
from decoders import CASES, build
from helpers import smollm2_gguf

from qkv_cli.errors import QkvError
from qkv_cli.models import load_model
from qkv_cli.models.formats.gguf.reader import _row_reader
from qkv_cli.models.formats.safetensors import Tensor, Tensors
from qkv_cli.models.formats.stream import Buffers, Reused
from qkv_cli.models.quants.dequantize import QUANT_TYPES, dequantize
from qkv_cli.pipeline.generate import generate


def streamed(model):
    """Nothing resident: every layer is read anew on every pass, the head in blocks of rows."""
    model.fit_weights(0)
    assert model.params.blocks.resident == 0 and model.params.blocks.streamed == model.config.n_layers
    assert not model.params.head.keep
    return model


def assert_same_run(a, b, atol):
    np.testing.assert_allclose(a.attentions, b.attentions, rtol=0, atol=atol)
    np.testing.assert_allclose(a.hidden_states, b.hidden_states, rtol=0, atol=atol * 1e3)
    for l in a.layers:
        for name in ("Q", "K", "V", "scores", "weights", "output"):
            np.testing.assert_allclose(getattr(a.layers[l], name), getattr(b.layers[l], name), rtol=0, atol=atol * 1e3)


@pytest.mark.parametrize("kind", [name for name, _, _ in QUANT_TYPES.values()])
def test_gguf_rows_equal_the_rows_of_the_whole_tensor(kind):
    """A row of blocks dequantized alone is the whole tensor's row (random bytes; fp16 scales kept finite)."""
    _, block, nbytes = next(v for v in QUANT_TYPES.values() if v[0] == kind)
    rows, per_row = 9, 2
    rng = np.random.default_rng(0)
    raw = rng.integers(0, 256, rows * per_row * nbytes, dtype=np.uint8)
    whole = dequantize(raw, kind, (rows, per_row * block))
    finite = np.isfinite(whole).all(axis=1)
    ids = np.array([3, 0, 8, 3, 5])
    got = _row_reader(raw.tobytes(), 0, raw.size, kind, (rows, per_row * block))(ids)
    assert got.shape == (5, per_row * block)
    np.testing.assert_array_equal(got[finite[ids]], whole[ids][finite[ids]])


@pytest.fixture(scope="module")
def smollm2_pair():
    path = smollm2_gguf()
    return load_model(path, dtype="float64"), streamed(load_model(path, dtype="float64"))


def test_smollm2_streamed_equals_resident_in_float64(smollm2_pair):
    resident, stream = smollm2_pair
    text = "The cat sat on the mat because it was tired, and the dog watched it from the warm windowsill."
    ids = resident.tokenize(text).ids
    a = resident.forward(ids, layers=[0, 15, 29])
    b = stream.forward(ids, layers=[0, 15, 29])
    assert_same_run(a, b, 1e-12)
    fam = resident.family
    za = fam.logits(resident.params, resident.config, a.last_hidden_state)
    zb = fam.logits(stream.params, stream.config, b.last_hidden_state)
    assert za.shape == zb.shape == (len(ids), resident.config.vocab_size)
    np.testing.assert_allclose(za, zb, rtol=0, atol=1e-10)
    assert stream.params.head._whole is None and stream.params.blocks._kept == {}


def test_smollm2_streamed_generation_equals_resident(smollm2_pair):
    resident, stream = smollm2_pair
    a = generate(resident, resident.tokenize("The history of the Roman Empire"), max_new=6)
    b = generate(stream, stream.tokenize("The history of the Roman Empire"), max_new=6)
    assert list(a.ids) == list(b.ids) and len(a.ids) > 6


def test_partly_resident_keeps_the_first_layers(smollm2_pair):
    _, model = smollm2_pair
    layer = max(model.params.blocks.layer_bytes)
    model.fit_weights(model.fixed_bytes + model.params.head.nbytes + 7 * layer)
    blocks = model.params.blocks
    assert model.params.head.keep and blocks.resident == 5 and blocks.streamed == 25
    model.forward(model.tokenize("Hello there").ids)
    assert sorted(blocks._kept) == [0, 1, 2, 3, 4]
    assert model.weights_bytes == model.fixed_bytes + model.params.head.nbytes + 7 * layer
    streamed(model)


def test_too_large_even_streamed_is_one_line_with_figures():
    with pytest.raises(QkvError, match=r"does not fit even when read one layer at a time: its weights take .* MB"):
        load_model(smollm2_gguf(), dtype="float64", max_memory=2_000_000)


@pytest.mark.reference
@pytest.mark.parametrize("name", list(CASES))
def test_every_rope_family_streamed_equals_resident(name, tmp_path):
    from helpers import reference_import

    torch, transformers = reference_import("torch"), reference_import("transformers")
    build(transformers, torch, name, tmp_path)
    ids = [int(i) for i in np.random.default_rng(1).integers(3, 1400, 13)]
    a = load_model(tmp_path, dtype="float64").forward(ids, layers="all")
    b = streamed(load_model(tmp_path, dtype="float64")).forward(ids, layers="all")
    assert_same_run(a, b, 1e-12)


def long_ids(model, n_words: int):
    text = " ".join(["The quick brown fox jumps over the lazy dog while the cat watches it."] * n_words)
    return model.tokenize(text).ids


@pytest.mark.parametrize("rows", ["-40:", "0:7", "100:137", ":"])
def test_smollm2_kept_rows_equal_the_full_runs_rows(smollm2_pair, rows):
    """Beyond 1 MB of weights per layer the kernel goes block by block: the kept rows' weights are the full
    run's (float64 1e-12), in the layers kept and in the detailed layer, and the rest of the pass is unchanged."""
    resident, _ = smollm2_pair
    ids = long_ids(resident, 10)
    m = len(ids)
    assert 9 * m * m * 8 > 2**20  # the blocked path
    full = resident.forward(ids, layers=[29])
    part = resident.forward(ids, layers=[29], keep=[3, 29], rows=rows)
    r = np.arange(m)[slice(*(int(x) if x else None for x in rows.split(":")))]
    assert part.attention_layers == (3, 29) and list(part.rows) == list(r)
    assert part.attentions.shape == (2, 9, len(r), m)
    np.testing.assert_allclose(part.attentions, full.attentions[[3, 29]][:, :, r], rtol=0, atol=1e-12)
    np.testing.assert_allclose(part.hidden_states, full.hidden_states, rtol=0, atol=1e-9)
    a, b = full.layers[29], part.layers[29]
    for name in ("Q", "scores", "weights", "heads"):
        np.testing.assert_allclose(getattr(b, name), getattr(a, name)[:, r], rtol=0, atol=1e-9)
    np.testing.assert_allclose(b.output, a.output[r], rtol=0, atol=1e-9)
    assert b.labels == [a.labels[i] for i in r] and b.key_labels == a.labels


@pytest.mark.parametrize("rows", ["5:5", "200:", "9:3", "1:2:1:", "a:b", "::2"])
def test_rows_out_of_range_or_empty_name_the_valid_range(smollm2_pair, rows):
    resident, _ = smollm2_pair
    ids = resident.tokenize("The cat sat on the mat.").ids
    with pytest.raises(QkvError, match=r"selects no query of the 7 tokens: give A:B within 0\.\.7|not a slice|no step"):
        resident.forward(ids, rows=rows)


def test_a_single_pass_keeps_no_layer_and_a_second_keeps_them(smollm2_pair):
    """Residency pays only when a layer is read again: one pass holds two layers at most, whatever the budget."""
    model = smollm2_pair[0]  # every layer fits: resident = L
    blocks = model.params.blocks
    blocks.drop()
    ids = np.arange(5)
    model.forward(ids)
    assert len(blocks._kept) == 0
    model.forward(ids)
    assert len(blocks._kept) == min(blocks.resident, len(blocks))


def test_a_buffer_is_reused_once_no_array_made_from_it_lives():
    pool = Buffers(np.float32, limit=10**6)
    a = pool.take((3, 4))
    a[:] = 1
    view = a[1:].T  # a view of a view: its base is the buffer
    del a
    b = pool.take((3, 4))  # the first buffer is still seen through `view`: a new one
    assert pool.made == 2 and not np.shares_memory(b, view)
    del view, b
    c = pool.take((4, 3))  # same size, another shape: either buffer, no new one
    assert pool.made == 2 and c.shape == (4, 3) and c.flags.c_contiguous and c.dtype == np.float32
    d = pool.take((2, 6))
    assert pool.made == 2 and not np.shares_memory(c, d)
    e = pool.take((5,))  # another size: a new buffer
    assert pool.made == 3 and e.shape == (5,)


def test_the_pool_keeps_at_most_its_limit():
    pool = Buffers(np.float64, limit=3 * 800)  # three buffers of 100 float64
    held = [pool.take((100,)) for _ in range(5)]  # all in use: five made, the pool lets the oldest go
    assert pool.made == 5 and len(pool._pool) == 3
    assert all(any(np.shares_memory(h, b) for h in held) for b in pool._pool)
    del held
    again = [pool.take((100,)) for _ in range(3)]
    assert pool.made == 5 and len(again) == 3


def test_reused_reads_equal_plain_reads(smollm2_pair):
    """Tensors written into reused buffers (GGUF: dequantized in place, W^q and W^k's rows unpermuted on the
    stored blocks) equal the plain reads, and [W^q; W^k; W^v] equals their concatenation, in float64 and float32."""
    for dtype in ("float64", "float32"):
        w = Tensors(smollm2_pair[0].params.blocks._build.args[0].tensors, np.dtype(dtype), "SmolLM2")
        reader = Reused(w, Buffers(dtype, limit=10**8))
        keys = [f"layers.3.self_attn.{x}_proj.weight" for x in "qkv"]
        joined = reader.join(keys)
        np.testing.assert_array_equal(joined, np.concatenate([w(k) for k in keys]))
        assert joined.dtype == np.dtype(dtype) and joined.flags.c_contiguous
        for key in (*keys, "layers.3.mlp.down_proj.weight", "layers.3.input_layernorm.weight"):
            np.testing.assert_array_equal(reader(key), w(key))
        assert reader._buffers.made == 3  # joined, q and down_proj (k, v and the norm: under POOLED_BYTES)


def test_a_streamed_pass_reuses_its_buffers(smollm2_pair):
    _, model = smollm2_pair  # nothing resident: 30 layers read, 5 pooled tensors each (qkv, o, gate, up, down)
    pool = model.params.blocks._build.args[0]._buffers
    before = pool.made
    model.forward(model.tokenize("One pass, thirty layers").ids)
    assert pool.made - before <= 2 * 5 < 30 * 5


FINITE = [([1.0, 2.0], False), ([3e38, 3e38, -1.0], False), ([1.0, np.nan], True), ([np.inf, 1.0], True),
          ([np.inf, -np.inf], True)]  # fmt: skip


@pytest.mark.parametrize("values, refused", FINITE)
def test_fill_checks_every_value_is_finite(values, refused):
    """One sum finds NaN and inf; a sum that overflows (finite values) looks at each value before refusing."""
    arr = np.array(values, np.float32)
    w = Tensors({"t": Tensor(arr.shape, "F32", lambda: arr, "test")}, np.dtype(np.float32), "m")
    out = np.empty_like(arr)
    if refused:
        with pytest.raises(QkvError, match=r"tensor 't' has [12] non-finite values .* the checkpoint is damaged"):
            w.fill("t", out)
    else:
        np.testing.assert_array_equal(w.fill("t", out), arr)
