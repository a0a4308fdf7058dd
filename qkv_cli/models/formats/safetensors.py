"""Checkpoint tensors as untrusted input: names, shapes and dtypes checked from the header before any value is read.

A model folder holds model.safetensors, or shards listed in model.safetensors.index.json; shard paths are kept
inside the folder and must be regular files; a tensor held by two shards is refused. Values are memory-mapped,
never unpickled, and read once the header is checked and the memory budget allows them (``Tensors``, two at a
time on two threads while the model is built), which casts them once and refuses NaN or inf.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from qkv_cli.errors import QkvError
from qkv_cli.files import inside, open_regular, read_json

WEIGHTS = "model.safetensors"
INDEX = "model.safetensors.index.json"
SKIP = ("position_ids", ".attn.bias", ".attn.masked_bias")  # buffers, not weights (int64 ids, causal masks)
MAX_HEADER_BYTES = 100 * 2**20  # the safetensors format's own limit
MAX_INDEX_BYTES = 64 * 2**20
MAX_SHARDS = 10_000

# safetensors dtype -> NumPy dtype (little-endian, as the format stores them); BF16 is widened to float32
NUMPY_DTYPES = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "BF16": "<u2", "I64": "<i8", "I32": "<i4", "I16": "<i2",
                "I8": "i1", "U8": "u1", "BOOL": "?"}  # fmt: skip
FLOATS = ("F64", "F32", "F16", "BF16")


@dataclass(frozen=True)
class Tensor:
    """One stored tensor: its shape and storage type from the header, and how to read its values."""

    shape: tuple[int, ...]
    kind: str  # "F32", "BF16", "Q4_1", ...: how it is stored
    read: Callable  # () -> ndarray of the values (float16/32/64); a view of the file where possible
    source: str  # the file it is in, for messages
    rows: Callable | None = None  # (ids) -> the rows ids of a 2-D tensor (a 3-D GGUF stack: of [E * rows, columns]),
    # read alone (None: read() and index)
    into: Callable | None = None  # (out, order=None) -> out: the values written into a reused array (a GGUF
    # tensor: dequantized in place, rows in `order`), None: read() and copy

    @property
    def is_float(self) -> bool:
        return self.kind not in ("I64", "I32", "I16", "I8", "U8", "BOOL")


def _corrupt(file: Path, why: str) -> QkvError:
    return QkvError(f"cannot read '{file}': {why}; the file may be truncated or corrupt: download it again")


def _weight_files(folder: Path) -> list[Path]:
    if (folder / WEIGHTS).exists():
        return [folder / WEIGHTS]
    index = folder / INDEX
    doc = read_json(index, MAX_INDEX_BYTES, what="shard index")
    weight_map = doc.get("weight_map") if isinstance(doc, dict) else None
    if not isinstance(weight_map, dict) or not weight_map:
        raise QkvError(f"cannot read the shard index '{index}': it has no 'weight_map' of tensor -> file")
    shards = sorted({str(v) for v in weight_map.values()})
    if len(shards) > MAX_SHARDS:
        raise QkvError(f"the shard index '{index}' lists {len(shards)} files: at most {MAX_SHARDS}")
    return [inside(folder, name, f"the shard index '{index}'") for name in shards]


def read_safetensors(file: Path) -> dict[str, Tensor]:
    """The tensors of one .safetensors file, from its header; values are memory-mapped when read."""
    import numpy as np

    with open_regular(file, "weights file") as handle:
        try:
            n = int.from_bytes(handle.read(8), "little")
            handle.seek(0, 2)
            size = handle.tell()
            if n < 2 or n > MAX_HEADER_BYTES or 8 + n > size:
                raise _corrupt(file, f"the header claims {n} bytes in a file of {size}")
            handle.seek(8)
            header = json.loads(handle.read(n))
        except (OSError, ValueError, RecursionError) as exc:
            raise _corrupt(file, f"bad header ({type(exc).__name__})") from None
    if not isinstance(header, dict):
        raise _corrupt(file, "the header is not a JSON object")
    data_size = size - 8 - n
    mapped = []  # the memory map, made on the first read (by one thread: the tensors are read on two)
    lock = threading.Lock()

    def region(start, end):
        with lock:
            if not mapped:
                mapped.append(np.memmap(file, dtype=np.uint8, mode="r", offset=8 + n, shape=(data_size,)))
        return mapped[0][start:end]

    tensors, spans = {}, []
    for name, info in header.items():
        if name == "__metadata__":
            continue
        try:
            kind, shape, (start, end) = info["dtype"], tuple(_whole(x) for x in info["shape"]), info["data_offsets"]
            start, end = _whole(start), _whole(end)
        except (KeyError, TypeError, ValueError):
            raise _corrupt(file, f"bad header entry for tensor '{name}'") from None
        if kind not in NUMPY_DTYPES:
            raise QkvError(f"'{file}': tensor '{name}' has dtype {kind}, which qkv cannot read")
        count = 1
        for x in shape:
            if x < 0:
                raise _corrupt(file, f"tensor '{name}' has a negative dimension")
            count *= x
        if not 0 <= start <= end <= data_size or end - start != count * np.dtype(NUMPY_DTYPES[kind]).itemsize:
            raise _corrupt(file, f"tensor '{name}' points outside the file or does not match its shape {shape}")
        spans.append((start, end, name))
        read = _reader(region, start, end, kind, shape)
        tensors[name] = Tensor(shape, kind, read, str(file), _row_reader(read) if len(shape) == 2 else None)
    spans.sort()
    for (_, end, a), (start, _, b) in zip(spans, spans[1:], strict=False):
        if start < end:
            raise _corrupt(file, f"tensors '{a}' and '{b}' overlap")
    return tensors


def _whole(x) -> int:
    """A header's size or offset: a JSON integer (not 1.5, true, Infinity or NaN), within 64 bits as the format's."""
    if isinstance(x, bool) or not isinstance(x, int) or not -(2**63) <= x < 2**64:
        raise ValueError(x)
    return x


def _reader(region, start, end, kind, shape):
    def read():
        import numpy as np

        raw = region(start, end) if end > start else np.zeros(0, np.uint8)
        arr = raw.view(NUMPY_DTYPES[kind]).reshape(shape)
        if kind == "BF16":  # the upper half of a float32: widen
            return (arr.astype(np.uint32) << 16).view(np.float32)
        return np.asarray(arr if arr.flags.aligned else arr.copy())  # a plain ndarray view of the map

    return read


def _row_reader(read):
    """Rows of a memory-mapped tensor: indexing the map's view reads those rows' pages only."""

    def rows(ids):
        import numpy as np

        return np.asarray(read()[ids])

    return rows


def read_weights(folder: Path) -> dict[str, Tensor]:
    """Every tensor of the folder's safetensors file(s), from the headers; a name in two shards is refused."""
    tensors: dict[str, Tensor] = {}
    for file in _weight_files(folder):
        for name, tensor in read_safetensors(file).items():
            if name in tensors:
                raise QkvError(f"tensor '{name}' is in both '{tensors[name].source}' and '{file}': refused")
            tensors[name] = tensor
    return tensors


def check_weights(
    tensors: dict, expected: dict, prefixes: tuple[str, ...], name: str, source: str = "config.json"
) -> dict[str, Tensor]:
    """The tensors the forward pass needs, prefix stripped, after checking names, shapes and dtypes (no values)."""
    usable = {k: v for k, v in tensors.items() if not k.endswith(SKIP)}
    prefix = next((p for p in prefixes if all(p + k in usable for k in expected)), None)
    if prefix is None:  # report against the prefix that matches the most names
        prefix = max(prefixes, key=lambda p: sum(p + k in usable for k in expected))
        missing = [prefix + k for k in expected if prefix + k not in usable]
        more = f" and {len(missing) - 3} more" if len(missing) > 3 else ""
        raise QkvError(
            f"{name}: the weights lack {', '.join(missing[:3])}{more}: the checkpoint does not match its {source}"
        )
    out = {}
    for key, shape in expected.items():
        t = usable[prefix + key]
        if tuple(t.shape) != tuple(shape):
            raise QkvError(
                f"{name}: tensor '{prefix + key}' has shape {tuple(t.shape)}, expected {tuple(shape)} from its {source}"
            )
        if not t.is_float:
            raise QkvError(f"{name}: tensor '{prefix + key}' has dtype {t.kind}: expected floating point")
        out[key] = t
    return out


class Tensors:
    """The checked tensors of one checkpoint, read and cast once: ``w(name)`` -> contiguous `dtype` array (read then,
    or ahead of the call by read_ahead)."""

    def __init__(self, tensors: dict[str, Tensor], dtype, name: str):
        self.tensors, self.dtype, self.name = tensors, dtype, name
        self._ahead: dict = {}  # key -> Future of its array (read_ahead)

    def read_ahead(self, skip=()) -> None:
        """Start reading every tensor but those in `skip` on 2 threads, in order: NumPy releases the GIL while it
        dequantizes, casts and checks (SmolLM2 in float32: 1.05-1.15 -> 0.57 s; float64: 1.5-1.7 -> 0.9-1.3 s).
        w(key) then waits for its own. Memory: the arrays are the ones w(key) would make, made earlier; the reads
        may run ahead of the caller, so at most every tensor (the model's weights, which it keeps) exists at once."""
        from concurrent.futures import ThreadPoolExecutor

        pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="qkv-load")
        self._ahead = {key: pool.submit(self._read, key) for key in self.tensors if key not in skip}
        pool.shutdown(wait=False)

    def cancel(self) -> None:
        """Stop reading ahead (a failed load): what has not started is dropped; the (at most 2) reads running
        finish in the background and are discarded."""
        for future in self._ahead.values():
            future.cancel()
        self._ahead = {}

    def __call__(self, key: str):
        future = self._ahead.pop(key, None)
        return self._read(key) if future is None else future.result()

    def _read(self, key: str):
        import numpy as np

        return self._checked(key, np.ascontiguousarray(self.tensors[key].read(), dtype=self.dtype))

    def fill(self, key: str, out):  # out: [*shape] of any float dtype, C-contiguous -> out, checked
        """The tensor's values written into `out` (a buffer the caller reuses: no new array of the tensor's size)."""
        import numpy as np

        t = self.tensors[key]
        if t.into is not None:
            t.into(out)
        else:
            np.copyto(out, t.read(), casting="unsafe")
        return self._checked(key, out)

    def rows(self, key: str, ids):  # [k] -> [k, d]: rows of a 2-D tensor, cast and checked, the rest never read
        import numpy as np

        t = self.tensors[key]
        raw = t.rows(ids) if t.rows is not None else t.read()[ids]
        return self._checked(key, np.ascontiguousarray(raw, dtype=self.dtype))

    def _checked(self, key: str, arr):
        import numpy as np

        with np.errstate(over="ignore", invalid="ignore"):  # a finite sum: every value is finite (NaN, inf propagate)
            total = np.add.reduce(arr, axis=None) if arr.size else 0
        if not np.isfinite(total) and not np.isfinite(arr).all():  # (a sum can overflow: then each value is looked at)
            bad = int(arr.size - np.count_nonzero(np.isfinite(arr)))
            raise QkvError(
                f"{self.name}: tensor '{key}' has {bad} non-finite values (NaN or inf) in {self.dtype}: "
                "the checkpoint is damaged"
            )
        return arr

    def __contains__(self, key: str) -> bool:
        return key in self.tensors

    def nbytes(self, itemsize: int, keys=None) -> int:
        """Bytes the tensors (all, or those named in keys) take once cast to a dtype of this item size."""
        total = 0
        for key in self.tensors if keys is None else keys:
            count = 1
            for x in self.tensors[key].shape:
                count *= x
            total += count * itemsize
        return total
