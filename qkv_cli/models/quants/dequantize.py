"""ggml's storage types, dequantized with NumPy: one kernel per type, each a few vectorized steps over its blocks.

A block of `block` values is stored in `nbytes` bytes: fp16 scales (d, and dmin or m for the "_1" and K types)
and packed integers q; a value is d * q, or d * q + m, or d * q - dmin * m for the K-quants (Q4_0, Q8_0, Q4_K and
Q6_K in quants.fast, the IQ types in quants_iq, the 4-bit floats and ternary types in quants_fp). The float32 operations
run in the order gguf-py's (and ggml's reference C) do, one rounding per step, so the results are equal bit for bit.
Kernels run over chunks of blocks in place, so the temporaries stay small and in cache.
"""

from __future__ import annotations

import numpy as np

from qkv_cli.errors import QkvError
from qkv_cli.models.quants.bits import BITS, F16, F32, NIBBLES, PAIRS
from qkv_cli.models.quants.bits import f16 as _f16
from qkv_cli.models.quants.bits import unpack as _unpack
from qkv_cli.models.quants.fast import KERNELS as FAST_KERNELS
from qkv_cli.models.quants.fast import _scale_min_k4
from qkv_cli.models.quants.fp import KERNELS as FP_KERNELS
from qkv_cli.models.quants.iq import KERNELS as IQ_KERNELS

QK_K = 256  # values per K-quant super-block
QUANT_TYPES = {  # ggml type id -> (name, values per block, bytes per block)
    0: ("F32", 1, 4), 1: ("F16", 1, 2), 2: ("Q4_0", 32, 18), 3: ("Q4_1", 32, 20), 6: ("Q5_0", 32, 22),
    7: ("Q5_1", 32, 24), 8: ("Q8_0", 32, 34), 10: ("Q2_K", QK_K, 84), 11: ("Q3_K", QK_K, 110),
    12: ("Q4_K", QK_K, 144), 13: ("Q5_K", QK_K, 176), 14: ("Q6_K", QK_K, 210), 16: ("IQ2_XXS", QK_K, 66),
    17: ("IQ2_XS", QK_K, 74), 18: ("IQ3_XXS", QK_K, 98), 19: ("IQ1_S", QK_K, 50), 20: ("IQ4_NL", 32, 18),
    21: ("IQ3_S", QK_K, 110), 22: ("IQ2_S", QK_K, 82), 23: ("IQ4_XS", QK_K, 136), 29: ("IQ1_M", QK_K, 56),
    30: ("BF16", 1, 2), 34: ("TQ1_0", QK_K, 54), 35: ("TQ2_0", QK_K, 66), 39: ("MXFP4", 32, 17), 40: ("NVFP4", 64, 36),
}  # fmt: skip
BY_NAME = {name: (block, nbytes) for name, block, nbytes in QUANT_TYPES.values()}
# every ggml type id's name (llama.cpp's ggml.h), for messages about the ones qkv cannot read
GGML_NAMES = (
    "F32 F16 Q4_0 Q4_1 Q4_2 Q4_3 Q5_0 Q5_1 Q8_0 Q8_1 Q2_K Q3_K Q4_K Q5_K Q6_K Q8_K IQ2_XXS IQ2_XS IQ3_XXS IQ1_S "
    "IQ4_NL IQ3_S IQ2_S IQ4_XS I8 I16 I32 I64 F64 IQ1_M BF16 Q4_0_4_4 Q4_0_4_8 Q4_0_8_8 TQ1_0 TQ2_0 IQ4_NL_4_4 "
    "IQ4_NL_4_8 IQ4_NL_8_8 MXFP4 NVFP4 Q1_0"
).split()
CHUNK_BYTES = 1 << 18  # input bytes per chunk (1-2 MB of float32 out): fastest of 16 KB .. 1 MB in bench/dequant.py


def ggml_name(type_id: int) -> str:
    return GGML_NAMES[type_id] if 0 <= type_id < len(GGML_NAMES) else f"type {type_id}"


def _q4_1(b, out):  # [n, 20] -> [n, 32]: d * q + m
    out.reshape(-1, 2, 16)[:] = _unpack(b[:, 4:], NIBBLES, 0x0F)
    out *= _f16(b, 0)
    out += _f16(b, 2)


def _five_bits(qh, qs, out):  # [n, 4], [n, 16] -> out [n, 32] = q: low nibble | fifth bit << 4
    high = np.unpackbits(qh, axis=1, bitorder="little") << np.uint8(4)
    out.reshape(-1, 2, 16)[:] = _unpack(qs, NIBBLES, 0x0F) | high.reshape(-1, 2, 16)


def _q5_0(b, out):  # [n, 22] -> [n, 32]: d * (q - 16)
    _five_bits(b[:, 2:6], b[:, 6:], out)
    out -= F32(16)
    out *= _f16(b, 0)


def _q5_1(b, out):  # [n, 24] -> [n, 32]: d * q + m
    _five_bits(b[:, 4:8], b[:, 8:], out)
    out *= _f16(b, 0)
    out += _f16(b, 2)


def _q2_k(b, out):  # [n, 84] -> [n, 256]: (d * sc) * q - (dmin * m), 16 groups of 16
    scales = b[:, :16]
    dl = _f16(b, 80) * (scales & np.uint8(0x0F)).astype(F32)
    ml = _f16(b, 82) * (scales >> np.uint8(4)).astype(F32)
    out.reshape(-1, 2, 4, 32)[:] = _unpack(b[:, 16:80].reshape(-1, 2, 32), PAIRS, 3)
    o = out.reshape(-1, 16, 16)
    o *= dl[:, :, None]
    o -= ml[:, :, None]


def _q3_k(b, out):  # [n, 110] -> [n, 256]: (d * (sc - 32)) * (q - 4 * (1 - hbit)), 16 groups of 16
    s = b[:, 96:108]
    low = _unpack(s[:, :8], NIBBLES, 0x0F).reshape(-1, 16)
    high = _unpack(s[:, 8:], PAIRS, 3).reshape(-1, 16)
    dl = _f16(b, 108) * ((low | (high << np.uint8(4))).astype(np.int8) - np.int8(32)).astype(F32)
    q = _unpack(b[:, 32:96].reshape(-1, 2, 32), PAIRS, 3).reshape(-1, 8, 32)
    hbit = _unpack(b[:, :32], BITS, 1)  # [n, 8, 32]
    out.reshape(-1, 8, 32)[:] = q.astype(np.int8) - ((hbit ^ np.uint8(1)) << np.uint8(2)).astype(np.int8)
    o = out.reshape(-1, 16, 16)
    o *= dl[:, :, None]


def _k_scales(b):  # [n, >=16] -> [n, 8, 1] d * sc, [n, 8, 1] dmin * m
    sc, mn = _scale_min_k4(b[:, 4:16])
    return (_f16(b, 0) * sc.astype(F32))[:, :, None], (_f16(b, 2) * mn.astype(F32))[:, :, None]


def _q5_k(b, out):  # [n, 176] -> [n, 256]: (d * sc) * q - (dmin * m), q = nibble | bit << 4, 8 groups of 32
    dl, ml = _k_scales(b)
    ql = _unpack(b[:, 48:].reshape(-1, 4, 32), NIBBLES, 0x0F).reshape(-1, 8, 32)
    o = out.reshape(-1, 8, 32)
    o[:] = ql | (_unpack(b[:, 16:48], BITS, 1) << np.uint8(4))
    o *= dl
    o -= ml


KERNELS = {  # name -> kernel(blocks [n, nbytes] uint8, out [n, block] float32), filling out in place
    "Q4_1": _q4_1, "Q5_0": _q5_0, "Q5_1": _q5_1, "Q2_K": _q2_k, "Q3_K": _q3_k, "Q5_K": _q5_k, **FAST_KERNELS,
    **IQ_KERNELS, **FP_KERNELS,
}  # fmt: skip


def dequantize(raw: np.ndarray, kind: str, shape, out=None) -> np.ndarray:  # [nbytes] uint8 -> shape float32
    """The values of one tensor stored as `kind`; F32 is a view of `raw` (no copy), every other type a new array,
    or (a block type) written into `out`, a C-contiguous float32 array of as many values, reused by the caller."""
    if kind not in BY_NAME:
        raise QkvError(f"ggml type {kind!r} cannot be dequantized: supported are {', '.join(BY_NAME)}")
    block, nbytes = BY_NAME[kind]
    count = 1
    for x in shape:
        count *= int(x)
    row = int(shape[-1]) if len(shape) else 1  # ggml quantizes along rows: a row is whole blocks
    if row % block or raw.dtype != np.uint8 or raw.ndim != 1 or raw.size != count // block * nbytes:
        raise QkvError(f"{raw.size} bytes of {kind} cannot hold a tensor of shape {tuple(shape)}")
    if kind == "F32":
        return raw.view("<f4").reshape(shape)
    if kind == "F16":
        return raw.view(F16).astype(F32).reshape(shape)
    if kind == "BF16":  # the upper half of a float32
        return (raw.view("<u2").astype(np.uint32) << np.uint32(16)).view(F32).reshape(shape)
    blocks = raw.reshape(-1, nbytes)
    if out is None:
        out = np.empty((len(blocks), block), F32)
    elif out.dtype != F32 or out.size != count or not out.flags.c_contiguous:
        raise ValueError(f"out must be a C-contiguous float32 array of {count} values")
    out = out.reshape(len(blocks), block)
    step = max(1, CHUNK_BYTES // nbytes)
    kernel = KERNELS[kind]
    with np.errstate(over="ignore", invalid="ignore"):  # a hostile scale (inf, NaN, 2^127) gives inf / NaN values,
        for start in range(0, len(blocks), step):  # refused later by the weights' finite check, not warned about
            kernel(blocks[start : start + step], out[start : start + step])
    return out.reshape(shape)
