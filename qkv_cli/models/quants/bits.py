"""The steps every dequantization kernel shares: fp16 scales read from block bytes, packed bit fields unpacked."""

from __future__ import annotations

import numpy as np

F16, F32 = np.dtype("<f2"), np.float32
NIBBLES = np.array([0, 4], np.uint8)[:, None]  # low nibbles first, then high ones
PAIRS = np.array([0, 2, 4, 6], np.uint8)[:, None]  # 2-bit fields, lowest first
BITS = np.arange(8, dtype=np.uint8)[:, None]


def f16(blocks, start):  # [n, nbytes] -> [n, 1] float32: the fp16 at byte `start` of each block
    return blocks[:, start : start + 2].view(F16).astype(F32)


def unpack(packed, shifts, mask):  # [..., k] uint8 -> [..., len(shifts), k]: (packed >> shift) & mask, per shift
    return (packed[..., None, :] >> shifts) & np.uint8(mask)


def bits_of(packed):  # [..., k] uint8 -> [..., 8 k] uint8 of 0 / 1: each byte's bits, lowest first
    return np.unpackbits(packed, axis=-1, bitorder="little")


def signs_of(packed):  # [..., k] uint8 -> [..., 8 k] float32: +1 for a clear bit, -1 for a set one, lowest first
    return np.where(bits_of(packed) == 0, F32(1), F32(-1))
