"""ggml dequantization: hand-built blocks with known values (the element order of every layout), then one contract
test over QUANT_TYPES (every type qkv reads) against gguf-py's dequantize, bit for bit, on random blocks and on
gguf-py's own quantization. The IQ, 4-bit float and ternary types' own cases are in test_quants_iq.py."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import reference_import

from qkv_cli.errors import QkvError
from qkv_cli.models.quants import dequantize as quants
from qkv_cli.models.quants.dequantize import QUANT_TYPES, dequantize

# where each block keeps its fp16 scales (ggml's block_* structs): random blocks get finite ones there (IQ1_M splits
# its d over 4 nibbles; MXFP4 and NVFP4 have no fp16)
SCALES = {"Q4_0": (0,), "Q4_1": (0, 2), "Q5_0": (0,), "Q5_1": (0, 2), "Q8_0": (0,), "Q2_K": (80, 82),
          "Q3_K": (108,), "Q4_K": (0, 2), "Q5_K": (0, 2), "Q6_K": (208,), "IQ2_XXS": (0,), "IQ2_XS": (0,),
          "IQ2_S": (0,), "IQ3_XXS": (0,), "IQ3_S": (0,), "IQ1_S": (0,), "IQ4_NL": (0,), "IQ4_XS": (0,),
          "TQ1_0": (52,), "TQ2_0": (64,)}  # fmt: skip
KINDS = [name for name, _, _ in QUANT_TYPES.values()]
SIZES = {name: (block, nbytes) for name, block, nbytes in QUANT_TYPES.values()}


def f16(x) -> list[int]:  # the two bytes of an fp16
    return list(np.array([x], "<f2").view(np.uint8))


def random_blocks(rng, kind: str, n: int) -> np.ndarray:  # [n * nbytes] uint8, finite fp16 scales
    _, nbytes = SIZES[kind]
    raw = rng.integers(0, 256, (n, nbytes), dtype=np.uint8)
    for at in SCALES.get(kind, ()):
        raw[:, at : at + 2] = rng.normal(0, 0.1, n).astype("<f2").view(np.uint8).reshape(n, 2)
    if kind == "F32":
        raw = rng.normal(0, 1, n).astype("<f4").view(np.uint8).reshape(n, 4)
    return raw.reshape(-1)


# --- known values, no reference library -------------------------------------------------------------------------


def test_q8_0_is_d_times_q():
    q = np.arange(-16, 16, dtype=np.int8)
    raw = np.array(f16(0.5) + list(q.view(np.uint8)), np.uint8)
    np.testing.assert_array_equal(dequantize(raw, "Q8_0", (32,)), 0.5 * q)


def test_q4_0_and_q4_1_low_nibbles_first():
    j = np.arange(16)
    qs = list((j | ((15 - j) << 4)).astype(np.uint8))
    q = np.concatenate([j, 15 - j]).astype(np.float32)
    np.testing.assert_array_equal(dequantize(np.array(f16(2) + qs, np.uint8), "Q4_0", (32,)), 2 * (q - 8))
    raw = np.array(f16(0.25) + f16(-1) + qs, np.uint8)
    np.testing.assert_array_equal(dequantize(raw, "Q4_1", (1, 32)), (0.25 * q - 1)[None])


def test_q5_fifth_bit_from_qh():
    qh = [0b10100101, 0, 0, 0b10000000]  # bits 0, 2, 5, 7 and 31
    raw = np.array(f16(1) + qh + [0x21] * 16, np.uint8)  # low nibble 1, high nibble 2
    q = np.array([1] * 16 + [2] * 16)
    q[[0, 2, 5, 7, 31]] += 16
    np.testing.assert_array_equal(dequantize(raw, "Q5_0", (32,)), q - 16)
    raw = np.array(f16(1) + f16(0.5) + qh + [0x21] * 16, np.uint8)
    np.testing.assert_array_equal(dequantize(raw, "Q5_1", (32,)), q + 0.5)


def nibbles(qs):  # [128] -> [256] in ggml's K order: 32 low nibbles, the same 32 bytes' high nibbles, next 32 ...
    qs = np.asarray(qs).reshape(4, 32)
    return np.stack([qs & 15, qs >> 4], axis=1).reshape(-1)


def test_q4_k_and_q5_k_scale_one_min_zero():
    rng = np.random.default_rng(1)
    qs = rng.integers(0, 256, 128)
    scales = [1] * 4 + [0] * 4 + [1] * 4  # 8 scales of 1 (two in the high bytes' low nibbles), 8 mins of 0
    raw = np.array(f16(1) + f16(0) + scales + list(qs), np.uint8)
    np.testing.assert_array_equal(dequantize(raw, "Q4_K", (256,)), nibbles(qs))
    qh = np.zeros(32, np.uint8)
    qh[3] = 0b100  # value 2 * 32 + 3 gets bit 4
    raw = np.array(f16(1) + f16(0) + scales + list(qh) + list(qs), np.uint8)
    expected = nibbles(qs)
    expected[2 * 32 + 3] += 16
    np.testing.assert_array_equal(dequantize(raw, "Q5_K", (256,)), expected)


def test_q4_k_mins_are_subtracted():
    scales = [2] * 4 + [3] * 4 + [0] * 4  # sc 2, m 3 for groups 0-3; 0 and 0 for 4-7
    raw = np.array(f16(1) + f16(0.5) + scales + [0x11] * 128, np.uint8)
    out = dequantize(raw, "Q4_K", (256,))
    np.testing.assert_array_equal(out[:128], 2 * 1 - 1.5)
    np.testing.assert_array_equal(out[128:], 0)


def test_q6_k_q_minus_32():
    ql, qh = np.zeros(128, np.uint8), np.zeros(64, np.uint8)
    ql[0], qh[0] = 0x5, 0b11  # value 0: 5 | 3 << 4 = 53
    scales = list(np.int8([1] * 8 + [-2] * 8).view(np.uint8))
    out = dequantize(np.array(list(ql) + list(qh) + scales + f16(1), np.uint8), "Q6_K", (256,))
    assert out[0] == 53 - 32
    np.testing.assert_array_equal(out[1:128], -32)
    np.testing.assert_array_equal(out[128:], 64)


def test_q2_k_and_q3_k_two_bit_order():
    qs = np.zeros(64, np.uint8)
    qs[1] = 0b11100100  # values 1, 33, 65, 97: q = 0, 1, 2, 3
    raw = np.array([0x01] * 16 + list(qs) + f16(1) + f16(0), np.uint8)  # scale 1, min 0
    out = dequantize(raw, "Q2_K", (256,))
    assert list(out[[1, 33, 65, 97]]) == [0, 1, 2, 3] and out.sum() == 6
    hmask = [0xFF] * 32  # high bit set: no -4
    scales = [0x11] * 8 + [0xAA] * 4  # every 6-bit scale is 1 | 2 << 4 = 33, i.e. +1
    out = dequantize(np.array(hmask + list(qs) + scales + f16(1), np.uint8), "Q3_K", (256,))
    assert list(out[[1, 33, 65, 97]]) == [0, 1, 2, 3] and out.sum() == 6
    hmask[1] = 0xFE  # value 1 loses its high bit: 0 - 4
    out = dequantize(np.array(hmask + list(qs) + scales + f16(1), np.uint8), "Q3_K", (256,))
    assert out[1] == -4


def test_float_types():
    x = np.array([1.5, -2.0, 0.0, 65504.0], np.float32)
    np.testing.assert_array_equal(dequantize(x.astype("<f2").view(np.uint8), "F16", (2, 2)), x.reshape(2, 2))
    bf16 = (x.view(np.uint32) >> 16).astype("<u2").view(np.uint8)
    np.testing.assert_array_equal(dequantize(bf16, "BF16", (4,)), [1.5, -2.0, 0.0, 65280.0])
    raw = x.view(np.uint8)
    out = dequantize(raw, "F32", (4,))
    assert np.shares_memory(out, raw)  # a view, no copy


@pytest.mark.parametrize(
    "raw, kind, shape, message",
    [
        (np.zeros(292, np.uint8), "Q8_K", (256,), "supported are F32, F16"),
        (np.zeros(17, np.uint8), "Q4_0", (32,), "17 bytes of Q4_0"),
        (np.zeros(18, np.uint8), "Q4_0", (2, 16), "cannot hold"),
        (np.zeros(8, np.float32), "F32", (8,), "cannot hold"),
    ],
)
def test_refusals(raw, kind, shape, message):
    with pytest.raises(QkvError, match=message):
        dequantize(raw, kind, shape)


# --- the contract: gguf-py's dequantize, bit for bit ------------------------------------------------------------


def same_bits(a, b):
    assert a.dtype == b.dtype == np.float32 and a.shape == b.shape
    np.testing.assert_array_equal(a.view(np.uint32), b.view(np.uint32))


@pytest.mark.reference
@pytest.mark.parametrize("chunk", [None, 3], ids=["one-chunk", "uneven-chunks"])
@pytest.mark.parametrize("kind", KINDS)
def test_random_blocks_match_gguf(kind, chunk, monkeypatch):
    gguf = reference_import("gguf")
    block, nbytes = SIZES[kind]
    if chunk:  # 3 blocks a chunk: 7 * cols / block blocks end on a partial chunk
        monkeypatch.setattr(quants, "CHUNK_BYTES", chunk * nbytes)
    rng = np.random.default_rng(sum(map(ord, kind)))
    rows, cols = 7, 2 * block if block > 1 else 48
    raw = random_blocks(rng, kind, rows * cols // block)
    if kind in ("F16", "BF16"):  # every bit pattern: inf, NaN, subnormals
        raw = rng.integers(0, 2**16, rows * cols, dtype=np.uint16).astype("<u2").view(np.uint8)
    qtype = gguf.GGMLQuantizationType[kind]
    expected = gguf.quants.dequantize(raw.reshape(rows, -1), qtype)
    same_bits(dequantize(raw, kind, (rows, cols)), expected)
    if block > 1:  # into a reused buffer (what a layer's read does): the same bits, in that buffer
        buffer = np.full((rows, cols), np.nan, np.float32)
        assert dequantize(raw, kind, (rows, cols), out=buffer).base is buffer
        same_bits(buffer, expected)


@pytest.mark.reference
@pytest.mark.parametrize("kind", ["BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0"])
def test_gguf_quantized_values_match_gguf(kind):
    gguf = reference_import("gguf")
    rng = np.random.default_rng(7)
    x = rng.normal(0, 1, (5, 3, 64)).astype(np.float32)
    x[0, 0, :32] = 0  # an all-zero block
    x[1, 1, :32] = np.linspace(-1e4, 1e4, 32)
    qtype = gguf.GGMLQuantizationType[kind]
    raw = gguf.quants.quantize(x, qtype)
    expected = gguf.quants.dequantize(raw, qtype)
    same_bits(dequantize(raw.reshape(-1), kind, x.shape), expected)
    assert np.abs(expected - x).max() < 0.2 * np.abs(x).max()  # a sanity check on the oracle itself


@pytest.mark.reference
def test_quant_table_matches_gguf():
    gguf = reference_import("gguf")
    for type_id, (name, block, nbytes) in QUANT_TYPES.items():
        qtype = gguf.GGMLQuantizationType(type_id)
        assert qtype.name == name and gguf.GGML_QUANT_SIZES[qtype] == (block, nbytes)
        assert quants.ggml_name(type_id) == name
    for qtype in gguf.GGMLQuantizationType:
        assert quants.ggml_name(int(qtype)) == qtype.name
