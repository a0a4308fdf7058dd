"""Q4_0, Q8_0, Q4_K and Q6_K, the types of most published checkpoints, dequantized with contiguous steps only.

NumPy is fast on whole contiguous arrays and slow on short strided rows (a block's 16 or 32 values, its scale
broadcast over them): so the bit fields are cut from the chunk's bytes as one flat array (`flat & 15`, `flat >> 4`),
placed into the float32 output in one cast-copy per field, and each block's scale is repeated to the values'
shape before the one multiply. The float32 operations and their order are gguf-py's (and ggml's reference C): the
same bits. Each kernel fills `out` [n, block] from `b` [n, nbytes] (both C-contiguous, a chunk of models.quants).

The temporaries are a chunk's size (hundreds of KB): allocated and freed once per chunk, the C allocator may hand
such blocks back to the system and fault them in again the next time, and those page faults cost more than the
arithmetic (Q6_K took 3x as long, 20.6 ms against 6.2 ms for 4M values, in a process that had freed no large
array). So they are views into buffers each thread keeps (:func:`_scratch`), reused chunk after chunk.
"""

from __future__ import annotations

import math
import threading

import numpy as np

F32 = np.float32
U4, LOW4 = np.uint8(4), np.uint8(0x0F)
_local = threading.local()  # this thread's scratch buffers, by name


def _scratch(name, shape, dtype=np.uint8):  # -> an uninitialised array of this thread's, reused from call to call
    size = math.prod(shape) * np.dtype(dtype).itemsize
    buf = _local.__dict__.get(name)
    if buf is None or buf.size < size:
        buf = _local.__dict__[name] = np.empty(size, np.uint8)
    return buf[:size].view(dtype).reshape(shape)


def _f16(b, start):  # [n, nbytes] -> [n, 1] float32: the fp16 at byte `start` of each block
    return b[:, start : start + 2].view("<f2").astype(F32)


def _nibbles(b):  # [n, nbytes] -> the low and the high nibble of every byte, each [n, nbytes] uint8 (scratch)
    flat = b.reshape(-1)
    low = np.bitwise_and(flat, LOW4, out=_scratch("low", flat.shape))
    high = np.right_shift(flat, U4, out=_scratch("high", flat.shape))
    return low.reshape(b.shape), high.reshape(b.shape)


def _times(out, scales, group):  # out [n, k * group] *= scales [n, k], each scale over its group of values, in place
    out *= scales.repeat(group, axis=1)  # np.repeat, then one contiguous multiply: faster than a broadcast multiply


def _q8_0(b, out):  # [n, 34] -> [n, 32]: d * q, q int8
    out[:] = b[:, 2:].view(np.int8)
    _times(out, _f16(b, 0), 32)


def _q4_0(b, out):  # [n, 18] -> [n, 32]: d * (q - 8), low nibbles first
    low, high = _nibbles(b)
    low -= np.uint8(8)  # q - 8 in bytes (wrapping), read as int8: exact, and one float32 pass fewer
    high -= np.uint8(8)
    o = out.reshape(-1, 2, 16)
    o[:, 0] = low[:, 2:].view(np.int8)
    o[:, 1] = high[:, 2:].view(np.int8)
    _times(out, _f16(b, 0), 32)


def _scale_min_k4(s):  # [n, 12] -> [n, 8] scales, [n, 8] mins: 6-bit values packed as ggml's get_scale_min_k4
    d, m, md = s[:, 0:4], s[:, 4:8], s[:, 8:12]
    sc = np.concatenate([d & np.uint8(0x3F), (md & LOW4) | ((d >> np.uint8(2)) & np.uint8(0x30))], axis=1)
    mn = np.concatenate([m & np.uint8(0x3F), (md >> U4) | ((m >> np.uint8(2)) & np.uint8(0x30))], axis=1)
    return sc, mn


def _q4_k(b, out):  # [n, 144] -> [n, 256]: (d * sc) * q - (dmin * m), 8 groups of 32
    sc, mn = _scale_min_k4(b[:, 4:16])
    dl, ml = _f16(b, 0) * sc.astype(F32), _f16(b, 2) * mn.astype(F32)  # [n, 8] each
    low, high = _nibbles(b)
    o = out.reshape(-1, 4, 2, 32)  # group 2c + p: nibble p of bytes 32c .. 32c + 31
    o[:, :, 0] = low[:, 16:].reshape(-1, 4, 32)
    o[:, :, 1] = high[:, 16:].reshape(-1, 4, 32)
    _times(out, dl, 32)
    out -= ml.repeat(32, axis=1)


def _q6_k(b, out):  # [n, 210] -> [n, 256]: (d * sc) * (q - 32), q = nibble | 2 bits << 4, sc int8, 16 groups of 16
    n = len(b)
    dl = _f16(b, 208) * b[:, 192:208].view(np.int8).astype(F32)  # [n, 16]
    low, high = _nibbles(b)
    q = _scratch("q", (n, 2, 2, 64))  # [half, nibble, 64 bytes of ql]: the values' order, as [n, 256]
    q[:, :, 0] = low[:, :128].reshape(n, 2, 64)
    q[:, :, 1] = high[:, :128].reshape(n, 2, 64)
    qh = _scratch("qh", (n, 2, 32))
    qh.reshape(n, 64)[:] = b[:, 128:192]
    bits = _scratch("bits", (n, 2, 32))
    by_pair = q.reshape(n, 2, 4, 32)  # [half, pair k, 32 bytes of qh]: bits 2k, 2k + 1 of qh are q's bits 4, 5
    for k in range(4):  # bits 2k, 2k + 1 moved to 4, 5 (a left shift as a multiply: NumPy's uint8 << is slow)
        if k < 2:
            np.multiply(qh, np.uint8(16 >> 2 * k), out=bits)
        else:
            np.right_shift(qh, np.uint8(2 * k - 4), out=bits)
        bits &= np.uint8(0x30)
        by_pair[:, :, k] |= bits
    signed = q.reshape(n, 256).view(np.int8)
    signed -= np.int8(32)
    out[:] = signed
    _times(out, dl, 16)


KERNELS = {"Q8_0": _q8_0, "Q4_0": _q4_0, "Q4_K": _q4_k, "Q6_K": _q6_k}
