"""ggml's 4-bit float types (MXFP4 of gpt-oss, NVFP4) and its ternary ones (TQ1_0, TQ2_0: values -1, 0, +1).

MXFP4: a block of 32 e2m1 values (stored doubled, as integers) under one power-of-two scale byte (e8m0, halved);
NVFP4: 64 e2m1 values, one unsigned e4m3 scale per 16. TQ2_0 packs a ternary digit in 2 bits, TQ1_0 five in a byte
(base 3, scaled to 0-255) and four in each of 4 more bytes; both have one fp16 scale. The float32 steps follow
gguf-py's, so the results are equal bit for bit. Same signature as quants.KERNELS.
"""

from __future__ import annotations

import numpy as np

from qkv_cli.models.quants.bits import F32, NIBBLES, PAIRS, f16, unpack

E2M1 = np.array([0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12], F32)  # doubled, as ggml keeps them
POW3 = np.array([1, 3, 9, 27, 81], np.uint8)[:, None]


def _e8m0_half(e):  # uint8 -> float32: 2^(e - 128), ggml_e8m0_to_fp32_half (e < 2 lands in the subnormals)
    e = e.astype(np.uint32)
    bits = np.where(e < 2, np.uint32(0x00200000) << e, (e - np.uint32(1)) << np.uint32(23))
    return bits.astype(np.uint32).view(F32)


def _ue4m3_table() -> np.ndarray:  # [256] float32: unsigned e4m3 (bias 7) halved; 0 and 0x7F (NaN) read as 0
    x = np.arange(256)
    exp, man = (x >> 3) & 0xF, x & 7
    value = np.where(exp == 0, man * 2.0**-9, (1 + man / 8) * 2.0 ** (exp - 7.0))
    return np.where((x == 0) | (x == 0x7F), 0.0, value * 0.5).astype(F32)


UE4M3 = _ue4m3_table()


def _mxfp4(b, out):  # [n, 17] -> [n, 32]: d * value, d = 2^(e - 128), low nibbles first
    out.reshape(-1, 2, 16)[:] = E2M1[unpack(b[:, 1:], NIBBLES, 0x0F)]
    out *= _e8m0_half(b[:, :1])


def _nvfp4(b, out):  # [n, 36] -> [n, 64]: 4 groups of 16, d_g * value, low nibbles of 8 bytes first
    n = len(b)
    o = out.reshape(n, 4, 2, 8)
    o[:] = E2M1[unpack(b[:, 4:].reshape(n, 4, 8), NIBBLES, 0x0F)]
    o *= UE4M3[b[:, :4]][:, :, None, None]


def _tq1_0(b, out):  # [n, 54] -> [n, 256]: d * (t - 1), t the base-3 digits of 48 + 4 bytes
    n = len(b)
    first = (b[:, None, :32] * POW3).reshape(n, 160)  # uint8 products wrap: digit k moves to the top
    second = (b[:, None, 32:48] * POW3).reshape(n, 80)
    last = (b[:, None, 48:52] * POW3[:4]).reshape(n, 16)
    q = np.concatenate([first, second, last], axis=1)
    out[:] = ((q.astype(np.uint16) * np.uint16(3)) >> np.uint16(8)).astype(np.int8) - np.int8(1)
    out *= f16(b, 52)


def _tq2_0(b, out):  # [n, 66] -> [n, 256]: d * (q - 1), q 2 bits, 4 fields of each of 32 bytes, twice
    out.reshape(-1, 2, 4, 32)[:] = unpack(b[:, :64].reshape(-1, 2, 32), PAIRS, 3).astype(np.int8) - np.int8(1)
    out *= f16(b, 64)


KERNELS = {"MXFP4": _mxfp4, "NVFP4": _nvfp4, "TQ1_0": _tq1_0, "TQ2_0": _tq2_0}
