"""The IQ, 4-bit float and ternary types: blocks worked by hand from ggml's layouts (ggml-common.h, ggml-quants.c),
the grids against gguf-py's tables, hostile scales (inf, NaN, the largest exponents) dequantized without a NumPy
warning and bit for bit as gguf-py does, and gguf-py's own quantization of the types it can write."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from helpers import reference_import

from qkv_cli.models.quants.dequantize import QUANT_TYPES, dequantize
from qkv_cli.models.quants.grids import GRIDS, grid, ksigns

SIZES = {name: (block, nbytes) for name, block, nbytes in QUANT_TYPES.values()}
BLOCKED = [name for name, block, _ in QUANT_TYPES.values() if block > 1]
FP16_AT = {"Q4_0": (0,), "Q4_1": (0, 2), "Q5_0": (0,), "Q5_1": (0, 2), "Q8_0": (0,), "Q2_K": (80, 82),
           "Q3_K": (108,), "Q4_K": (0, 2), "Q5_K": (0, 2), "Q6_K": (208,), "IQ2_XXS": (0,), "IQ2_XS": (0,),
           "IQ2_S": (0,), "IQ3_XXS": (0,), "IQ3_S": (0,), "IQ1_S": (0,), "IQ4_NL": (0,), "IQ4_XS": (0,),
           "TQ1_0": (52,), "TQ2_0": (64,)}  # where each block keeps its fp16 scales  # fmt: skip
IQ4NL = [-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113]  # ggml's kvalues_iq4nl


def f16(x) -> list[int]:
    return list(np.array([x], "<f2").view(np.uint8))


def block(kind, *parts) -> np.ndarray:  # one block from byte lists, checked against the type's size
    raw = np.array([b for part in parts for b in part], np.uint8)
    assert raw.size == SIZES[kind][1]
    return raw


# --- worked by hand -----------------------------------------------------------------------------------------------


def test_iq4_nl_maps_nibbles_through_the_table():
    j = np.arange(16)
    raw = block("IQ4_NL", f16(0.5), (j | ((15 - j) << 4)).tolist())
    expected = 0.5 * np.array(IQ4NL)[np.concatenate([j, 15 - j])]
    np.testing.assert_array_equal(dequantize(raw, "IQ4_NL", (32,)), expected)


def test_iq4_xs_six_bit_scales():
    # every scale 33 (low nibble 1, high bits 2): d * (33 - 32) = 1; q 8 -> 1 in the low nibbles, 9 -> 13 in the high
    raw = block("IQ4_XS", f16(1), [0xAA, 0xAA], [0x11] * 4, [0x98] * 128)
    out = dequantize(raw, "IQ4_XS", (256,)).reshape(8, 2, 16)
    np.testing.assert_array_equal(out[:, 0], 1)
    np.testing.assert_array_equal(out[:, 1], 13)


def test_tq2_0_two_bit_fields():
    qs = [0x55] * 64  # every field 1: value 0
    qs[0] = 0b10_01_00_10  # fields 2, 0, 1, 2 of values 0, 32, 64, 96
    out = dequantize(block("TQ2_0", qs, f16(2)), "TQ2_0", (256,))
    assert out[[0, 32, 64, 96]].tolist() == [2, -2, 0, 2] and np.count_nonzero(out) == 3


def test_tq1_0_five_ternary_digits_a_byte():
    # digits 2 0 1 1 2 (most significant first) are 176 in base 3, stored as ceil(176 * 256 / 243) = 186
    qs = [0x80] * 48  # 128 decodes to digits 1 1 1 1 1: value 0
    qs[0] = 186
    out = dequantize(block("TQ1_0", qs, [0x80] * 4, f16(1)), "TQ1_0", (256,))
    assert out[[0, 32, 64, 96, 128]].tolist() == [1, -1, 0, 0, 1]
    assert np.count_nonzero(out) == 3


def test_mxfp4_power_of_two_scale():
    qs = [0] * 16
    qs[0] = 0x9F  # low nibble 15 (-6, doubled -12), high nibble 9 (-0.5, doubled -1)
    out = dequantize(block("MXFP4", [130], qs), "MXFP4", (32,))  # 2^(130 - 128) = 4
    assert out[0] == -48 and out[16] == -4 and np.count_nonzero(out) == 2
    qs[0] = 0x01
    assert dequantize(block("MXFP4", [0], qs), "MXFP4", (32,))[0] == 2.0**-128  # a subnormal, still exact


def test_iq2_xxs_grid_row_and_signs():
    # grid row 0 is eight 8s; scale nibble 0: d * 0.5 * 0.25 = 1/8; sign index 1 = ksigns 0x81: values 0 and 7 negated
    aux = np.array([1], "<u4").view(np.uint8).tolist()
    raw = block("IQ2_XXS", f16(1), ([0, 0, 0, 0] + aux) + ([0] * 8) * 7)
    out = dequantize(raw, "IQ2_XXS", (256,))
    assert out[:8].tolist() == [-1, 1, 1, 1, 1, 1, 1, -1] and (out[8:] == 1).all()


def test_iq1_s_delta_and_scale():
    # grid row 0 is eight -1s; qh: scale 1 (d * 3), delta sign bit set in the first u16: -1 - 1/8
    qh = [0, 0x90] + [0, 0] * 7
    out = dequantize(block("IQ1_S", f16(1), [0] * 32, qh), "IQ1_S", (256,))
    np.testing.assert_array_equal(out[:32], 3 * (-1 - 0.125))
    np.testing.assert_array_equal(out[32:], -1 + 0.125)


# --- hostile blocks: no warning, never a crash ------------------------------------------------------------------

HOSTILE_F16 = [np.inf, -np.inf, np.nan, 65504.0, -0.0, 6e-8]


def hostile_blocks(kind: str, rng) -> np.ndarray:  # [blocks * nbytes]: random payloads under extreme scales
    _, nbytes = SIZES[kind]
    n = 4 * len(HOSTILE_F16)
    raw = rng.integers(0, 256, (n, nbytes), dtype=np.uint8)
    scales = np.resize(np.array(HOSTILE_F16, "<f2"), n)
    for at in FP16_AT.get(kind, ()):
        raw[:, at : at + 2] = scales.view(np.uint8).reshape(n, 2)
    if kind == "IQ1_M":  # d's 16 bits are the top nibbles of the 4 u16 scales
        bits = scales.view("<u2").astype(np.uint16)
        sc = raw[:, 48:56].copy().view("<u2") & np.uint16(0x0FFF)
        sc |= ((bits[:, None] >> np.array([0, 4, 8, 12], np.uint16)) & np.uint16(0xF)) << np.uint16(12)
        raw[:, 48:56] = sc.view(np.uint8)
    if kind == "MXFP4":
        raw[:, 0] = np.resize(np.array([0, 1, 254, 255], np.uint8), n)
    if kind == "NVFP4":
        raw[:, :4] = np.resize(np.array([0x7F, 0x7E, 0xFF, 0x00], np.uint8), (n, 4))
    raw[-1] = 0xFF
    return raw.reshape(-1)


@pytest.mark.parametrize("kind", BLOCKED)
def test_hostile_scales_no_warning(kind):
    raw = hostile_blocks(kind, np.random.default_rng(3))
    block_values = SIZES[kind][0]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = dequantize(raw, kind, (len(raw) // SIZES[kind][1], block_values))
    if kind in FP16_AT or kind in ("IQ1_M", "MXFP4"):  # inf or NaN scales (MXFP4: 2^127 * 12) give non-finite values
        assert not np.isfinite(out).all()


@pytest.mark.reference
@pytest.mark.parametrize("kind", BLOCKED)
def test_hostile_scales_match_gguf(kind):
    gguf = reference_import("gguf")
    raw = hostile_blocks(kind, np.random.default_rng(4))
    rows = len(raw) // SIZES[kind][1]
    with np.errstate(all="ignore"):  # gguf-py warns on them
        expected = gguf.quants.dequantize(raw.reshape(rows, -1), gguf.GGMLQuantizationType[kind])
    got = dequantize(raw, kind, (rows, SIZES[kind][0]))
    np.testing.assert_array_equal(got.view(np.uint32), expected.view(np.uint32))


# --- gguf-py's tables and quantization ---------------------------------------------------------------------------


@pytest.mark.reference
@pytest.mark.parametrize("kind", list(GRIDS))
def test_grids_are_gguf_tables(kind):
    gguf = reference_import("gguf")
    cls = getattr(gguf.quants, kind)
    cls.init_grid()
    assert grid(kind).shape == cls.grid_shape
    np.testing.assert_array_equal(grid(kind), cls.grid.reshape(cls.grid_shape))


@pytest.mark.reference
def test_ksigns_is_gguf_table():
    gguf = reference_import("gguf")
    table = np.frombuffer(gguf.quants.IQ2_XXS.ksigns, np.uint8)
    bits = (table[:, None] >> np.arange(8, dtype=np.uint8)) & 1
    np.testing.assert_array_equal(ksigns(), np.where(bits == 1, -1, 1))


@pytest.mark.reference
@pytest.mark.parametrize("kind", ["TQ1_0", "TQ2_0", "MXFP4"])
def test_gguf_quantized_values_match_gguf(kind):
    gguf = reference_import("gguf")
    x = np.random.default_rng(5).normal(0, 1, (3, 512)).astype(np.float32)
    x[0, :256] = 0
    qtype = gguf.GGMLQuantizationType[kind]
    raw = gguf.quants.quantize(x, qtype)
    expected = gguf.quants.dequantize(raw, qtype)
    got = dequantize(raw.reshape(-1), kind, x.shape)
    np.testing.assert_array_equal(got.view(np.uint32), expected.view(np.uint32))
    assert (got[0, :256] == 0).all() and np.corrcoef(got[1:].ravel(), x[1:].ravel())[0, 1] > 0.6  # ternary is coarse
