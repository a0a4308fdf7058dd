"""The header of a GGUF file (llama.cpp's format), parsed from a memory map: every count and length is checked
against the bytes left in the file before anything is built, so a hostile header is refused without allocating.

Layout (little-endian): "GGUF", version u32, tensor count u64, metadata count u64; then each metadata entry
(key string, value type u32, value); then each tensor (name string, n_dims u32, dims u64 fastest first, ggml type
u32, data offset u64). A string is a u64 byte length and UTF-8 bytes; an array is an item type u32, a count u64
and the items.
"""

from __future__ import annotations

import struct

import numpy as np

from qkv_cli.errors import QkvError

MAGIC = b"GGUF"
VERSIONS = (2, 3)  # version 1 (2023) used 32-bit counts
MAX_DIMS = 4  # ggml's GGML_MAX_DIMS
MAX_NESTING = 8  # arrays of arrays, deepest
STRING, ARRAY = 8, 9
SCALARS = {0: "<u1", 1: "<i1", 2: "<u2", 3: "<i2", 4: "<u4", 5: "<i4", 6: "<f4", 7: "<u1", 10: "<u8", 11: "<i8",
           12: "<f8"}  # value type -> NumPy dtype (7 is bool, one byte)  # fmt: skip
FORMATS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<B", 10: "<Q", 11: "<q", 12: "<d"}
SCALAR_STRUCTS = {t: struct.Struct(f) for t, f in FORMATS.items()}  # value type -> the struct that reads it
MIN_SIZE = {**{t: f.size for t, f in SCALAR_STRUCTS.items()}, STRING: 8, ARRAY: 12}  # smallest value, in bytes
U32, U64, COUNTS = struct.Struct("<I"), struct.Struct("<Q"), struct.Struct("<4sIQQ")


def corrupt(path, why: str) -> QkvError:
    return QkvError(f"cannot read GGUF file '{path}': {why}")


def quote(name: str) -> str:
    """A key or tensor name for a message: quoted, escaped (one line) and cut at 80 characters."""
    return repr(name if len(name) <= 80 else name[:80] + "...")


def shown(value) -> str:
    """A metadata value for a message, in one short line: a number as it is, a string quoted, escaped and cut,
    anything else (an array) by its type."""
    if value is None:
        return "absent"
    if isinstance(value, str):
        return quote(value)
    return repr(value) if type(value) in (int, float, bool) else f"a {type(value).__name__}"


class Header:
    """A cursor over the header bytes: `pos` advances as values are read; each read checks the bytes are there."""

    def __init__(self, buf, size: int, path):
        self.buf, self.size, self.path, self.pos = buf, size, path, 0

    def error(self, why: str) -> QkvError:
        return corrupt(self.path, why)

    def take(self, n: int, what: str) -> int:
        """The offset of the next n bytes, which must be in the file."""
        start = self.pos
        if n > self.size - start:
            raise self.error(f"{what} runs past the end of the file (needs {n} bytes at offset {start}): truncated?")
        self.pos = start + n
        return start

    def unpack(self, fmt: struct.Struct, what: str):
        return fmt.unpack_from(self.buf, self.take(fmt.size, what))

    def count(self, n: int, item_size: int, what: str) -> int:
        """n items of at least item_size bytes each must fit in what is left of the file."""
        if n * item_size > self.size - self.pos:
            raise self.error(f"{what} declares {n} items: more than the {self.size - self.pos} bytes left can hold")
        return n

    def string(self, what: str) -> str:
        (n,) = self.unpack(U64, what)
        start = self.take(n, what)
        try:
            return str(self.buf[start : start + n], "utf-8")
        except UnicodeDecodeError:
            raise self.error(f"{what} is not UTF-8 text") from None

    def strings(self, n: int, what: str) -> list[str]:
        """n strings in a row: one tight loop, since a vocabulary holds tens of thousands."""
        buf, size, pos, unpack, out = self.buf, self.size, self.pos, U64.unpack_from, []
        append = out.append
        try:
            for _ in range(n):
                if size - pos < 8:
                    raise self.error(f"{what} (item {len(out)}) runs past the end of the file: truncated?")
                (k,) = unpack(buf, pos)
                pos += 8
                if k > size - pos:
                    raise self.error(f"{what} (item {len(out)}) is {k} bytes, past the end of the file: truncated?")
                append(buf[pos : pos + k].decode("utf-8"))
                pos += k
        except UnicodeDecodeError:
            raise self.error(f"{what} (item {len(out)}) is not UTF-8 text") from None
        self.pos = pos
        return out

    def value(self, vtype: int, what: str, depth: int = 0):
        """One metadata value: a Python scalar, a str, a list of str, a 1-D array of numbers, or a list (nested)."""
        if vtype in SCALAR_STRUCTS:
            (x,) = self.unpack(SCALAR_STRUCTS[vtype], what)
            return bool(x) if vtype == 7 else x
        if vtype == STRING:
            return self.string(what)
        if vtype != ARRAY:
            raise self.error(f"{what} has unknown value type {vtype}: known are 0-12")
        if depth >= MAX_NESTING:
            raise self.error(f"{what} nests arrays more than {MAX_NESTING} deep")
        itype, n = self.unpack(U32, what)[0], self.unpack(U64, what)[0]
        if itype not in MIN_SIZE:
            raise self.error(f"{what} is an array of unknown value type {itype}: known are 0-12")
        self.count(n, MIN_SIZE[itype], what)
        if itype == STRING:
            return self.strings(n, what)
        if itype == ARRAY:
            return [self.value(ARRAY, f"{what}[{i}]", depth + 1) for i in range(n)]
        dtype = np.dtype(SCALARS[itype])
        arr = np.frombuffer(self.buf, dtype, n, self.take(n * dtype.itemsize, what))
        return arr != 0 if itype == 7 else arr.astype(dtype.newbyteorder("="))  # a copy, in native byte order


def read_header(buf, size: int, path):
    """(version, metadata, [(name, dims fastest first, ggml type id, offset)], offset of the header's end)."""
    h = Header(buf, size, path)
    if size < 4 or buf[:4] != MAGIC:
        raise h.error("it does not start with 'GGUF': not a GGUF file")
    if size < COUNTS.size:
        raise h.error(f"it is {size} bytes: too short for a GGUF header, truncated?")
    _, version, n_tensors, n_kv = h.unpack(COUNTS, "the header")
    if version not in VERSIONS:
        if version & 0xFFFF == 0 and version >> 24 in VERSIONS:
            raise h.error("it is a big-endian GGUF file: qkv reads little-endian GGUF files only")
        raise h.error(f"GGUF version {version} is not supported: qkv reads versions {', '.join(map(str, VERSIONS))}")
    if n_kv * 13 + n_tensors * 24 > size - h.pos:  # smallest entry: 8 + 4 + 1 bytes; smallest tensor: 8 + 4 + 4 + 8
        raise h.error(f"it declares {n_tensors} tensors and {n_kv} metadata keys: more than {size} bytes can hold")
    metadata = {}
    for i in range(n_kv):
        key = h.string(f"metadata key {i}")
        (vtype,) = h.unpack(U32, f"metadata {quote(key)}")
        if key in metadata:
            raise h.error(f"metadata key {quote(key)} appears twice")
        metadata[key] = h.value(vtype, f"metadata {quote(key)}")
    infos = []
    for i in range(n_tensors):
        name = h.string(f"the name of tensor {i}")
        (n_dims,) = h.unpack(U32, f"tensor {quote(name)}")
        if n_dims > MAX_DIMS:
            raise h.error(f"tensor {quote(name)} has {n_dims} dimensions: ggml allows at most {MAX_DIMS}")
        dims = h.unpack(struct.Struct(f"<{n_dims}Q"), f"tensor {quote(name)}")
        type_id, offset = h.unpack(U32, f"tensor {quote(name)}")[0], h.unpack(U64, f"tensor {quote(name)}")[0]
        infos.append((name, dims, type_id, offset))
    return version, metadata, infos, h.pos
