"""ggml's IQ ("importance") types: a 256-value super-block of sub-blocks, each a few lattice points of a grid
(quants_grids) picked by index, with signs and a small scale per sub-block; IQ4_NL and IQ4_XS map 4-bit indices
through a fixed non-linear table instead.

A value is db * grid[index][k] * sign (IQ2, IQ3), dl * (grid[index][k] + delta) (IQ1) or dl * table[q] (IQ4),
with the float32 steps in gguf-py's order so the results are equal bit for bit. Same signature as quants.KERNELS:
kernel(blocks [n, nbytes] uint8, out [n, 256 or 32] float32), filling out in place.
"""

from __future__ import annotations

from functools import cache

import numpy as np

from qkv_cli.models.quants.bits import F32, NIBBLES, bits_of, f16, signs_of, unpack
from qkv_cli.models.quants.grids import grid, ksigns

IQ4_VALUES = np.array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113], F32)
SIGN_SHIFTS = np.array([0, 7, 14, 21], np.uint32)  # four 7-bit sign indices in a u32
IQ1_DELTA = F32(0.125)


@cache
def _signs() -> np.ndarray:
    return ksigns()


def _nibble_scales(s):  # [n, k] uint8 -> [n, 2 k] float32: low nibble, then high nibble, per byte
    return unpack(s, NIBBLES, 0x0F).transpose(0, 2, 1).reshape(len(s), -1).astype(F32)


def _iq2_xxs(b, out):  # [n, 66] -> [n, 256]: 8 x (4 grid bytes, u32 of 4 sign indices and a 4-bit scale)
    n = len(b)
    q = b[:, 2:].reshape(n, 8, 8)
    aux = q[:, :, 4:].copy().view("<u4")[..., 0]  # [n, 8]
    db = f16(b, 0) * (F32(0.5) + (aux >> np.uint32(28)).astype(F32)) * F32(0.25)
    signs = _signs()[(aux[..., None] >> SIGN_SHIFTS) & np.uint32(0x7F)]  # [n, 8, 4, 8]
    points = grid("IQ2_XXS")[q[:, :, :4]]  # [n, 8, 4, 8]
    out.reshape(n, 8, 4, 8)[:] = db[:, :, None, None] * points * signs


def _iq2_xs(b, out):  # [n, 74] -> [n, 256]: 32 u16 (9-bit grid index, 7-bit sign index), 16 4-bit scales
    n = len(b)
    qs = b[:, 2:66].copy().view("<u2")  # [n, 32]
    db = f16(b, 0) * (F32(0.5) + _nibble_scales(b[:, 66:])) * F32(0.25)  # [n, 16]
    signs = _signs()[qs >> np.uint16(9)].reshape(n, 16, 2, 8)
    points = grid("IQ2_XS")[qs & np.uint16(511)].reshape(n, 16, 2, 8)
    out.reshape(n, 16, 2, 8)[:] = db[:, :, None, None] * points * signs


def _iq2_s(b, out):  # [n, 82] -> [n, 256]: 32 grid bytes, 32 sign bytes, 8 bytes of 2-bit index highs, 16 scales
    n = len(b)
    high = unpack(b[:, 66:74], np.array([0, 2, 4, 6], np.uint8)[:, None], 3).transpose(0, 2, 1).reshape(n, 32)
    index = b[:, 2:34].astype(np.uint16) | (high.astype(np.uint16) << np.uint16(8))
    db = f16(b, 0) * (F32(0.5) + _nibble_scales(b[:, 74:])) * F32(0.25)  # [n, 16]
    points = grid("IQ2_S")[index].reshape(n, 16, 2, 8)
    out.reshape(n, 16, 2, 8)[:] = db[:, :, None, None] * points * signs_of(b[:, 34:66]).reshape(n, 16, 2, 8)


def _iq3_xxs(b, out):  # [n, 98] -> [n, 256]: 64 grid bytes, 8 u32 of 4 sign indices and a 4-bit scale
    n = len(b)
    aux = b[:, 66:].copy().view("<u4")  # [n, 8]
    db = f16(b, 0) * (F32(0.5) + (aux >> np.uint32(28)).astype(F32)) * F32(0.5)
    signs = _signs()[(aux[..., None] >> SIGN_SHIFTS) & np.uint32(0x7F)]  # [n, 8, 4, 8]
    points = grid("IQ3_XXS")[b[:, 2:66]].reshape(n, 8, 4, 8)
    out.reshape(n, 8, 4, 8)[:] = db[:, :, None, None] * points * signs


def _iq3_s(b, out):  # [n, 110] -> [n, 256]: 64 grid bytes, 8 bytes of index high bits, 32 sign bytes, 8 scales
    n = len(b)
    index = b[:, 2:66].astype(np.uint16) | (bits_of(b[:, 66:74]).astype(np.uint16) << np.uint16(8))
    scales = unpack(b[:, 106:110], NIBBLES, 0x0F).transpose(0, 2, 1).reshape(n, 8)
    db = f16(b, 0) * (np.uint8(1) + np.uint8(2) * scales)  # [n, 8]
    points = grid("IQ3_S")[index].reshape(n, 8, 4, 8)
    out.reshape(n, 8, 4, 8)[:] = db[:, :, None, None] * points * signs_of(b[:, 74:106]).reshape(n, 8, 4, 8)


def _iq1_index(qs, high):  # [n, 32] uint8, [n, 32] 3-bit highs -> [n, 32] 11-bit grid indices
    return qs.astype(np.uint16) | (high.astype(np.uint16) << np.uint16(8))


def _iq1_s(b, out):  # [n, 50] -> [n, 256]: 32 grid bytes, 8 u16 (4 x 3-bit index highs, 3-bit scale, delta sign)
    n = len(b)
    qh = b[:, 34:].copy().view("<u2")  # [n, 8]
    dl = f16(b, 0) * (np.uint16(2) * ((qh >> np.uint16(12)) & np.uint16(7)) + np.uint16(1))
    delta = np.where(qh & np.uint16(0x8000), -IQ1_DELTA, IQ1_DELTA)
    high = (qh[..., None] >> np.array([0, 3, 6, 9], np.uint16)) & np.uint16(7)  # [n, 8, 4]
    points = grid("IQ1_S")[_iq1_index(b[:, 2:34], high.reshape(n, 32))].reshape(n, 8, 4, 8)
    out.reshape(n, 8, 4, 8)[:] = dl[:, :, None, None] * (points + delta[:, :, None, None])


def _iq1_m(b, out):  # [n, 56] -> [n, 256]: 32 grid bytes, 16 bytes of 2 x (3-bit high, delta sign), 4 u16 scales
    n = len(b)
    sc = b[:, 48:].copy().view("<u2")  # [n, 4]: 3-bit scales, the fp16 d in their top nibbles
    top = (sc & np.uint16(0xF000)) >> np.array([12, 8, 4, 0], np.uint16)
    d = (top[:, 0] | top[:, 1] | top[:, 2] | top[:, 3]).view("<f2").astype(F32)[:, None]
    scales = (sc[..., None] >> np.array([0, 3, 6, 9], np.uint16)) & np.uint16(7)  # [n, 4, 4]
    dl = d * (np.uint16(2) * scales.reshape(n, 16) + np.uint16(1))  # [n, 16]
    qh = unpack(b[:, 32:48], NIBBLES, 0x0F).transpose(0, 2, 1).reshape(n, 32)  # low nibble first
    delta = np.where(qh & np.uint8(0x08), -IQ1_DELTA, IQ1_DELTA)  # ggml: -delta when bit 3 is set
    points = grid("IQ1_S")[_iq1_index(b[:, :32], qh & np.uint8(7))].reshape(n, 16, 2, 8)
    out.reshape(n, 16, 2, 8)[:] = dl[:, :, None, None] * (points + delta.reshape(n, 16, 2, 1))


def _iq4_nl(b, out):  # [n, 18] -> [n, 32]: d * table[q], low nibbles first
    out.reshape(-1, 2, 16)[:] = IQ4_VALUES[unpack(b[:, 2:], NIBBLES, 0x0F)]
    out *= f16(b, 0)


def _iq4_xs(b, out):  # [n, 136] -> [n, 256]: (d * (sc - 32)) * table[q], 8 groups of 32, 6-bit scales
    n = len(b)
    low = unpack(b[:, 4:8], NIBBLES, 0x0F).transpose(0, 2, 1).reshape(n, 8)
    high = (b[:, 2:4].copy().view("<u2") >> np.arange(0, 16, 2, dtype=np.uint16)).astype(np.uint8) & np.uint8(3)
    dl = f16(b, 0) * ((low | (high << np.uint8(4))).astype(np.int8) - np.int8(32)).astype(F32)  # [n, 8]
    o = out.reshape(n, 8, 2, 16)
    o[:] = IQ4_VALUES[unpack(b[:, 8:].reshape(n, 8, 16), NIBBLES, 0x0F)]
    o *= dl[:, :, None, None]


KERNELS = {
    "IQ2_XXS": _iq2_xxs, "IQ2_XS": _iq2_xs, "IQ2_S": _iq2_s, "IQ3_XXS": _iq3_xxs, "IQ3_S": _iq3_s,
    "IQ1_S": _iq1_s, "IQ1_M": _iq1_m, "IQ4_NL": _iq4_nl, "IQ4_XS": _iq4_xs,
}  # fmt: skip
