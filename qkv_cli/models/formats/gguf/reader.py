"""GGUF files (llama.cpp's one-file checkpoints) as untrusted input: the header is parsed and every tensor checked
(type, dimensions, alignment, bounds, overlap) before any value is read; values are dequantized on each read from
one read-only memory map of the file, which is never read whole.

Metadata values are Python int, float, bool and str; arrays of strings are lists of str, arrays of numbers 1-D
NumPy arrays of the stored dtype, arrays of arrays lists. Tensors keep their GGUF names ("blk.0.attn_q.weight");
GGUF lists dimensions fastest first, so a tensor's shape is the reverse (576 x 49152 in the file -> (49152, 576)).
"""

from __future__ import annotations

import math
import mmap
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from qkv_cli.files import open_regular
from qkv_cli.models.formats.gguf.header import corrupt, quote, read_header
from qkv_cli.models.formats.safetensors import Tensor
from qkv_cli.models.quants.dequantize import QUANT_TYPES, dequantize, ggml_name

DEFAULT_ALIGNMENT = 32  # GGUF's, when general.alignment is absent
INT64 = 2**63  # ggml counts values in int64
CHUNK_VALUES = 1 << 20  # values dequantized at a time into a float32 chunk when the output is of another dtype
SUPPORTED = ", ".join(name for name, _, _ in QUANT_TYPES.values())


@dataclass(frozen=True)
class GGUFFile:
    """One GGUF file: its metadata (key -> value) and its tensors (GGUF name -> Tensor), read lazily."""

    path: Path
    version: int
    alignment: int
    metadata: dict
    tensors: dict[str, Tensor]


def read_gguf(path) -> GGUFFile:
    """The metadata and tensors of a GGUF file (versions 2 and 3); a bad file is a QkvError naming the problem."""
    path = Path(path)
    with open_regular(path, "GGUF file") as handle:
        try:
            buf = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) if os.fstat(handle.fileno()).st_size else b""
            size = len(buf)
        except (OSError, ValueError, OverflowError) as exc:
            raise corrupt(path, f"it cannot be memory-mapped ({exc})") from None
    version, metadata, infos, end = read_header(buf, size, path)
    alignment = _alignment(metadata.get("general.alignment", DEFAULT_ALIGNMENT), path)
    data_start = -(-end // alignment) * alignment  # the data section starts at the next multiple of the alignment
    tensors: dict[str, Tensor] = {}
    spans = []
    for name, dims, type_id, offset in infos:
        if name in tensors:
            raise corrupt(path, f"tensor {quote(name)} appears twice")
        kind, shape, nbytes = _layout(name, dims, type_id, path)
        if offset % alignment:
            raise corrupt(path, f"tensor {quote(name)} starts at data offset {offset}, not a multiple of {alignment}")
        start = data_start + offset
        if nbytes > size - start:
            raise corrupt(
                path,
                f"tensor {quote(name)} ({kind} {shape}, {nbytes} bytes at offset {start}) runs past the end of the "
                f"file ({size} bytes): truncated?",
            )
        spans.append((start, start + nbytes, name))
        flat = (math.prod(shape[:-1]), shape[-1]) if len(shape) in (2, 3) else None  # a 3-D stack: its rows
        rows = _row_reader(buf, start, nbytes, kind, flat) if flat else None
        into = _into(buf, start, nbytes, kind, shape) if isinstance(buf, mmap.mmap) else None
        tensors[name] = Tensor(shape, kind, _reader(buf, start, nbytes, kind, shape), str(path), rows, into)
    spans.sort()
    for (_, end_a, a), (start_b, _, b) in zip(spans, spans[1:], strict=False):
        if start_b < end_a:
            raise corrupt(path, f"the data of tensors {quote(a)} and {quote(b)} overlap")
    return GGUFFile(path, version, alignment, metadata, tensors)


def _alignment(value, path) -> int:
    if type(value) is not int or value < 1 or value & (value - 1):
        shown = value if type(value) in (int, float) else f"a {type(value).__name__}"
        raise corrupt(path, f"general.alignment is {shown}: it must be a power of two")
    return value


def _layout(name: str, dims: tuple, type_id: int, path) -> tuple[str, tuple[int, ...], int]:
    """(ggml type name, NumPy shape, bytes of data) of one tensor, after checking its type and dimensions."""
    if type_id not in QUANT_TYPES:
        raise corrupt(
            path,
            f"tensor {quote(name)} is stored as {ggml_name(type_id)}, which qkv cannot read: supported are {SUPPORTED}",
        )
    kind, block, block_bytes = QUANT_TYPES[type_id]
    count = 1
    for d in dims:
        if d == 0 or d >= INT64:
            raise corrupt(
                path, f"tensor {quote(name)} has dimensions {list(dims)}: each must be at least 1 (and < 2^63)"
            )
        count *= d
    if count >= INT64:
        raise corrupt(path, f"tensor {quote(name)} has dimensions {list(dims)}: their product overflows 64 bits")
    row = dims[0] if dims else 1
    if row % block:
        raise corrupt(
            path, f"tensor {quote(name)} has rows of {row} values: not a whole number of {kind} blocks ({block})"
        )
    return kind, tuple(reversed(dims)), count // block * block_bytes


def _reader(buf, start: int, nbytes: int, kind: str, shape: tuple[int, ...]):
    def read():  # -> float32 array of `shape`: for F32 a read-only view of the map, else dequantized anew
        return dequantize(np.frombuffer(buf, np.uint8, nbytes, start), kind, shape)

    return read


def _into(buf: mmap.mmap, start: int, nbytes: int, kind: str, shape: tuple[int, ...]):
    """into(out, order=None): the tensor dequantized into `out` (a C-contiguous array of its shape, any float dtype,
    reused by the caller), rows in `order` when given (a permutation of the rows, applied to the stored bytes: a row
    is whole blocks). Float32 is written in place; another dtype through a float32 chunk of CHUNK_VALUES. The
    map's pages are asked for ahead of the read (MADV_WILLNEED) and released after it (MADV_DONTNEED: they stay in
    the page cache, out of this process's resident memory)."""
    pages = _pages(start, nbytes, len(buf))
    rows_ = math.prod(shape[:-1]) if len(shape) > 1 else 1

    def into(out, order=None):  # out: [*shape]
        raw = np.frombuffer(buf, np.uint8, nbytes, start)
        _advise(buf, "MADV_WILLNEED", pages)
        try:
            if order is not None:  # [rows, row bytes][order]: a copy of the bytes, 4.5x smaller than of the values
                raw = raw.reshape(rows_, -1)[np.asarray(order)].reshape(-1)
            if out.dtype == np.float32 and kind not in ("F32", "F16", "BF16"):
                dequantize(raw, kind, shape, out=out)
                return out
            flat, rows = out.reshape(rows_, -1), raw.reshape(rows_, -1)
            step = max(1, CHUNK_VALUES // flat.shape[1])
            scratch = np.empty(min(rows_, step) * flat.shape[1], np.float32)
            for a in range(0, rows_, step):
                b = min(rows_, a + step)
                part = scratch[: (b - a) * flat.shape[1]]
                flat[a:b] = dequantize(rows[a:b].reshape(-1), kind, (b - a, flat.shape[1]), out=part)
            return out
        finally:
            del raw
            _advise(buf, "MADV_DONTNEED", pages)

    return into


def _pages(start: int, nbytes: int, size: int) -> tuple[int, int]:
    """(offset, length) of the whole pages holding bytes [start, start + nbytes) of a map of `size` bytes."""
    first = start - start % mmap.PAGESIZE
    return first, min(size, start + nbytes) - first


def _advise(buf: mmap.mmap, advice: str, pages: tuple[int, int]) -> None:
    """madvise(mmap.<advice>) on a range of the map; a platform without it (or a kernel that refuses) only loses
    the hint."""
    flag = getattr(mmap, advice, None)
    if pages[1] > 0 and flag is not None and hasattr(buf, "madvise"):
        try:
            buf.madvise(flag, *pages)
        except (OSError, ValueError):
            pass


def _row_reader(buf, start: int, nbytes: int, kind: str, shape: tuple[int, ...]):
    """Rows of a 2-D tensor, dequantized alone: a row is a whole number of blocks (checked by _layout), so row r is
    the bytes [r * row_bytes, (r + 1) * row_bytes) and dequantizes to exactly what the whole tensor's row r is."""
    row_bytes = nbytes // shape[0]

    def rows(ids):  # [k] -> float32 [k, d]
        ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        unique, where = np.unique(ids, return_inverse=True)
        raw = np.frombuffer(buf, np.uint8, nbytes, start).reshape(shape[0], row_bytes)[unique]
        return dequantize(raw.reshape(-1), kind, (len(unique), shape[1]))[where]

    return rows
