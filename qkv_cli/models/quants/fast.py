"""Q4_0, Q8_0, Q4_K and Q6_K, the types of most published checkpoints, dequantized in a few steps over whole chunks.

NumPy is fast on whole contiguous arrays and slow on short strided rows (a block's 16 or 32 values, its scale
broadcast over them), where it pays a call per row. So each kernel works on whole chunks in the values' own order:
a block's packed bytes are first copied, as opaque items of 16 to 64 bytes, to every place in the value order that reads
them (one copy, a memcpy per item); the bit fields are then cut out by 64-bit word operations over the whole chunk
(shifts given per word by a constant pattern, masks per byte), so that one cast-copy puts the integers into the
float32 output; each block's scales are repeated to the values' shape before the one multiply. The float32
operations and their order are gguf-py's (and ggml's reference C): the same bits. Word operations are the same on
either byte order (shifts of under 8 bits, then a mask per byte). Each kernel fills `out` [n, block] from `b`
[n, nbytes] (both C-contiguous, a chunk of models.quants).

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
_local = threading.local()  # this thread's scratch buffers, by name


def _scratch(name, shape, dtype=np.uint8):  # -> an uninitialised array of this thread's, reused from call to call
    size = math.prod(shape) * np.dtype(dtype).itemsize
    buf = _local.__dict__.get(name)
    if buf is None or buf.size < size:
        buf = _local.__dict__[name] = np.empty(size, np.uint8)
    return buf[:size].view(dtype).reshape(shape)


def _bytes(byte):  # -> a uint64 whose eight bytes are each `byte`
    return np.uint64(int.from_bytes(bytes([byte]) * 8, "little"))


M0F, MC0 = _bytes(0x0F), _bytes(0xC0)
_patterns: dict[tuple, np.ndarray] = {}  # a row of word shifts -> that row repeated down the most rows asked for


def _down(row: tuple, n: int) -> np.ndarray:  # [n, len(row)] uint64, every row `row` (read only, shared)
    have = _patterns.get(row)
    if have is None or len(have) < n:
        have = np.tile(np.array(row, np.uint64), (n, 1))
        have.flags.writeable = False
        _patterns[row] = have
    return have[:n]


def _spread(b, start, stop, item, copies, name):  # -> [n, (stop - start) / item, copies] items of `item` bytes
    """Bytes start..stop of each block, cut into items of `item` bytes, each copied `copies` times in a row
    (scratch): item i of a block at [:, i, 0 .. copies - 1]."""
    n, kind = len(b), f"V{item}"
    to = _scratch(name, (n, (stop - start) // item, copies), kind)
    to[:] = b[:, start:stop].view(kind)[:, :, None]
    return to


def _f16(b, start):  # [n, nbytes] -> [n, 1] float32: the fp16 at byte `start` of each block
    return b[:, start : start + 2].view("<f2").astype(F32)


def _times(out, scales, group):  # out [n, k * group] *= scales [n, k], each scale over its group of values, in place
    out *= scales.repeat(group, axis=1)  # np.repeat, then one contiguous multiply: faster than a broadcast multiply


def _q8_0(b, out):  # [n, 34] -> [n, 32]: d * q, q int8
    out[:] = b[:, 2:].view(np.int8)
    _times(out, _f16(b, 0), 32)


def _nibble_words(spread, row):  # the spread bytes' words >> the row's shift (0 or 4), & 0x0F: one nibble per byte
    n = len(spread)
    w = spread.view(np.uint64).reshape(n, -1)
    np.right_shift(w, _down(row, n), out=w)
    w &= M0F
    return w


def _q4_0(b, out):  # [n, 18] -> [n, 32]: d * (q - 8), low nibbles first
    q = _spread(b, 2, 18, 16, 2, "q4_0")  # [n, 1, 2]: the 16 bytes twice, low nibbles then high
    signed = _nibble_words(q, (0, 0, 4, 4)).view(np.int8)
    signed -= np.int8(8)  # q - 8 in bytes, read as int8: exact, and one float32 pass fewer
    out[:] = signed.reshape(out.shape)
    _times(out, _f16(b, 0), 32)


def _scale_min_k4(s):  # [n, 12] -> [n, 8] scales, [n, 8] mins: 6-bit values packed as ggml's get_scale_min_k4
    """Bytes 0-3 hold scales 0-3 in their low 6 bits, bytes 4-7 mins 0-3; scale (min) 4 + j is byte 8 + j's low
    (high) nibble, with bits 4-5 from the top two bits of byte j (4 + j). As 32-bit words of 4 bytes each."""
    n = len(s)
    words = _scratch("k4", (n, 3), "<u4")
    words.view("V12")[:] = s.view("V12")
    d, m, md = words[:, 0], words[:, 1], words[:, 2]
    got = np.empty((n, 4), "<u4")  # scales 0-3, 4-7, mins 0-3, 4-7
    low6, low4, bits45 = np.uint32(0x3F3F3F3F), np.uint32(0x0F0F0F0F), np.uint32(0x30303030)
    for at, six, nibbles, shift in ((0, d, md, 0), (2, m, md, 4)):
        np.bitwise_and(six, low6, out=got[:, at])
        high = got[:, at + 1]
        np.right_shift(six, np.uint32(2), out=high)
        high &= bits45
        high |= (nibbles >> np.uint32(shift)) & low4
    both = got.view(np.uint8)
    return both[:, :8], both[:, 8:]


def _q4_k(b, out):  # [n, 144] -> [n, 256]: (d * sc) * q - (dmin * m), 8 groups of 32
    sc, mn = _scale_min_k4(b[:, 4:16])
    dl, ml = _f16(b, 0) * sc.astype(F32), _f16(b, 2) * mn.astype(F32)  # [n, 8] each
    q = _spread(b, 16, 144, 32, 2, "q4_k")  # [n, 4, 2]: group 2c + p is nibble p of bytes 32c .. 32c + 31
    out[:] = _nibble_words(q, ((0,) * 4 + (4,) * 4) * 4).view(np.uint8).reshape(out.shape)
    _times(out, dl, 32)
    out -= ml.repeat(32, axis=1)


def _q6_k(b, out):  # [n, 210] -> [n, 256]: (d * sc) * (q - 32), q = nibble | 2 bits << 4, sc int8, 16 groups of 16
    """Values 128h + 32k + l (half h, k = 0..3, l = 0..31): the low (k < 2) or high nibble of ql byte
    64h + 32(k % 2) + l, and bits 2k, 2k + 1 of qh byte 32h + l as bits 4, 5."""
    n = len(b)
    dl = _f16(b, 208) * b[:, 192:208].view(np.int8).astype(F32)  # [n, 16]
    q = _nibble_words(_spread(b, 0, 128, 64, 2, "q6_k"), ((0,) * 8 + (4,) * 8) * 2)  # [half, nibble, 64 B]
    high = _spread(b, 128, 192, 32, 4, "q6_kh").view(np.uint64).reshape(n, 32)  # [half, k, 32 bytes of qh]
    to_top = _down(((6,) * 4 + (4,) * 4 + (2,) * 4 + (0,) * 4) * 2, n)  # bits 2k, 2k + 1 to bits 6, 7
    np.left_shift(high, to_top, out=high)
    high &= MC0
    high >>= np.uint64(2)
    q |= high
    signed = q.view(np.int8)
    signed -= np.int8(32)
    out[:] = signed.reshape(out.shape)
    _times(out, dl, 16)


KERNELS = {"Q8_0": _q8_0, "Q4_0": _q4_0, "Q4_K": _q4_k, "Q6_K": _q6_k}
