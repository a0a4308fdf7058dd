"""Weights read as the forward pass reaches them: a model larger than memory runs one layer at a time.

    for l in 0..L-1:  W_l = read(l) (dequantized, cast);  x_{l+1} = block(W_l, x_l);  drop W_l unless resident

The checkpoint stays memory-mapped. `Layers` builds layer l's block when it is asked for, the next one on a
second thread while the current one computes. A layer read a second time (a second pass: generation's steps,
repeated calls) stays, up to `resident` layers (the budget sets how many: all of them when they fit); a single
pass keeps none, so it holds two layers' weights at most whatever the budget. `RowMatrix` holds the embedding
and the output head: E[ids] reads only those rows, and the head's scores h W_out^T are computed in blocks of
rows unless the budget lets the head stay whole.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Sequence

import numpy as np

HEAD_BLOCK_ROWS = 8192  # rows of W_out read at a time when the head is not kept (8192 x 4096 float32: 134 MB)
POOLED_BYTES = 1 << 20  # tensors of a layer at least this large are read into reused buffers (Buffers)


class Layers(Sequence):
    """Layer l's weights (a family's DecoderLayer), built by build(l) on first use; `resident` of them stay."""

    def __init__(self, build: Callable[[int], object], n: int, layer_bytes: Sequence[int]):
        self._build, self._n = build, n
        self.layer_bytes = tuple(int(b) for b in layer_bytes)  # what each layer's weights take once cast
        self.resident = n  # how many layers stay once read (set from the budget: fit)
        self._kept: dict[int, object] = {}
        self._seen: set[int] = set()  # layers read once: the next read keeps them (if resident allows)
        self._last: tuple[int, object] | None = None  # the layer asked for last (asked again by the same pass)
        self._next: tuple[int, object] | None = None  # (l, Future): the next layer, read while this one computes
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, l):
        if isinstance(l, slice):
            return [self[i] for i in range(*l.indices(self._n))]
        l = int(l)
        if l < 0:
            l += self._n
        if not 0 <= l < self._n:
            raise IndexError(l)
        with self._lock:
            again = self._last is not None and self._last[0] == l  # the same pass asking again (a layer's detail)
            block = self._take(l)
            if not again and l not in self._kept and l in self._seen and len(self._kept) < self.resident:
                self._kept[l] = block
            self._seen.add(l)
            self._last = (l, block)
            self._read_next(l + 1)
        return block

    def _take(self, l: int):
        if l in self._kept:
            return self._kept[l]
        if self._last is not None and self._last[0] == l:
            return self._last[1]
        if self._next is not None and self._next[0] == l:
            future, self._next = self._next[1], None
            return future.result()
        return self._build(l)

    def _read_next(self, l: int) -> None:
        """Start reading layer l on a second thread, if the pass will need it and it is not kept."""
        if l >= self._n or l in self._kept or (self._next and self._next[0] == l):
            return
        from concurrent.futures import ThreadPoolExecutor

        pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="qkv-layer")
        self._next = (l, pool.submit(self._build, l))
        pool.shutdown(wait=False)

    @property
    def streamed(self) -> int:
        """Layers read anew on every pass (the others stay once read)."""
        return max(0, self._n - self.resident)

    def peak_bytes(self) -> int:
        """What the layers' weights hold at most: the resident ones, and while streaming the current and next."""
        largest = sorted(self.layer_bytes, reverse=True)
        held = min(self._n, self.resident + (2 if self.streamed else 0))
        return sum(largest[:held])

    def fit(self, spare: int) -> None:
        """Keep as many layers as `spare` bytes hold beside the two a streamed pass needs (all when they fit)."""
        if sum(self.layer_bytes) <= spare:
            self.resident = self._n
            return
        each = max(self.layer_bytes) or 1
        self.resident = max(0, min(self._n, spare // each - 2))
        for l in sorted(self._kept)[self.resident :]:
            del self._kept[l]

    def drop(self) -> None:
        """Forget every layer read (the next pass reads them again)."""
        with self._lock:
            self._kept, self._last, self._next, self._seen = {}, None, None, set()


def _references(pool: list, i: int) -> int:
    return sys.getrefcount(pool[i])


_UNUSED = _references([np.empty(0)], 0)  # a buffer only the pool holds (no array made from it is alive)


class Buffers:
    """Flat arrays reused from layer to layer, so that reading a layer makes no new array of a tensor's size (a
    new array costs the kernel a page fault and a zeroed page per 4 KB). A buffer is free again when no array made
    from it is alive (every view holds its base: its reference count says so); the pool keeps at most `limit`
    bytes of buffers (the two layers a streamed pass holds), the oldest leave it beyond that."""

    def __init__(self, dtype, limit: int):
        self.dtype, self.limit = np.dtype(dtype), int(limit)
        self._pool: list[np.ndarray] = []
        self._lock = threading.Lock()
        self.made = 0  # buffers allocated (the rest of the takes reused one)

    def take(self, shape: tuple[int, ...]) -> np.ndarray:  # -> [*shape], C-contiguous, values undefined
        count = 1
        for x in shape:
            count *= int(x)
        with self._lock:
            for i in range(len(self._pool)):
                if self._pool[i].size == count and _references(self._pool, i) == _UNUSED:
                    return self._pool[i].reshape(shape)
            buf = np.empty(count, self.dtype)
            self._pool.append(buf)
            self.made += 1
            while len(self._pool) > 1 and sum(b.nbytes for b in self._pool) > self.limit:
                del self._pool[0]  # an array still made from it keeps it alive; else its memory goes back
            return buf.reshape(shape)


class Reused:
    """A checkpoint's Tensors (w) read into Buffers: w(key) and w.join(keys) as Tensors gives them, each large
    tensor written into a reused buffer (Tensors.fill: a GGUF tensor is dequantized in place) instead of a new
    array; everything else is w's own."""

    def __init__(self, w, buffers: Buffers):
        self._w, self._buffers = w, buffers

    def _pooled(self, shape) -> bool:
        count = 1
        for x in shape:
            count *= int(x)
        return count * self._buffers.dtype.itemsize >= POOLED_BYTES

    def __call__(self, key: str):
        shape = tuple(self._w.tensors[key].shape)
        if not self._pooled(shape):
            return self._w(key)
        return self._w.fill(key, self._buffers.take(shape))

    def join(self, keys):  # [k_i, d] each -> [sum k_i, d]: [W^q; W^k; W^v] written in place, no concatenation
        shapes = [tuple(self._w.tensors[key].shape) for key in keys]
        rows = sum(s[0] for s in shapes)
        if len({s[1:] for s in shapes}) != 1 or not self._pooled((rows, *shapes[0][1:])):
            return np.concatenate([self._w(key) for key in keys])
        out = self._buffers.take((rows, *shapes[0][1:]))
        a = 0
        for key, shape in zip(keys, shapes, strict=True):
            self._w.fill(key, out[a : a + shape[0]])
            a += shape[0]
        return out

    def __contains__(self, key: str) -> bool:
        return key in self._w

    def __getattr__(self, name):  # rows, nbytes, tensors, dtype, name ...: w's
        return getattr(self._w, name)


def reused(w, dtype, limit: int):
    """A checkpoint's Tensors read into a pool of `limit` bytes of buffers; anything else (a family's wrapper that
    changes values: Llama 4's PairsToHalves) as it is."""
    from qkv_cli.models.formats.safetensors import Tensors

    return Reused(w, Buffers(dtype, limit)) if type(w) is Tensors else w


class RowMatrix:
    """A (V, d) matrix of the checkpoint read by rows: rows(ids) reads only those rows; whole() reads it all once
    (and keeps it when `keep`); scores(h) is h W^T, block by block of rows when it is not kept."""

    def __init__(self, weights, key: str, shape: tuple[int, int], dtype):
        self._w, self._key = weights, key
        self.shape = tuple(shape)
        self.dtype = np.dtype(dtype)
        self.keep = True  # set from the budget: the whole matrix stays once read
        self._whole = None

    @property
    def nbytes(self) -> int:
        return self.shape[0] * self.shape[1] * self.dtype.itemsize

    def rows(self, ids):  # [k] -> [k, d]
        if self._whole is not None:
            return self._whole[ids]
        return self._w.rows(self._key, np.asarray(ids, dtype=np.int64))

    def whole(self):  # -> [V, d]
        if self._whole is not None:
            return self._whole
        arr = self._w(self._key)
        if self.keep:
            self._whole = arr
        return arr

    def scores(self, h):  # [m, d] -> [m, V]: h W^T
        if self.keep or self._whole is not None:
            return h @ self.whole().T  # (m, d) x (d, V) -> (m, V)
        V = self.shape[0]
        z = np.empty((h.shape[0], V), dtype=np.result_type(h.dtype, self.dtype))
        for a in range(0, V, HEAD_BLOCK_ROWS):
            b = min(V, a + HEAD_BLOCK_ROWS)
            np.matmul(h, self.rows(np.arange(a, b)).T, out=z[:, a:b])  # (m, d) x (d, b - a)
        return z

    def peak_bytes(self) -> int:
        """What the matrix holds at most: whole when kept, else one block of rows."""
        return self.nbytes if self.keep else min(self.shape[0], HEAD_BLOCK_ROWS) * self.shape[1] * self.dtype.itemsize


def streamed(params) -> bool:
    """Whether a family's prepared weights are read as the pass reaches them (the RoPE decoders)."""
    return isinstance(getattr(params, "blocks", None), Layers)


def held_bytes(params, fixed: int) -> int:
    """What a streamed model's weights hold at most during a pass: the norms (fixed), the layers kept and the two
    being read, the head (whole or one block of rows; the embedding's rows are part of the activations)."""
    head = params.head.peak_bytes() if isinstance(params.head, RowMatrix) else 0
    return fixed + params.blocks.peak_bytes() + head


def fit(params, fixed: int, spare: int) -> None:
    """Share `spare` bytes of weights: the head stays whole if it fits beside two streamed layers, then as many
    layers stay resident as the rest holds."""
    layers, head = params.blocks, params.head
    spare -= fixed
    if isinstance(head, RowMatrix):
        two = sum(sorted(layers.layer_bytes, reverse=True)[:2])
        head.keep = head.nbytes + two <= spare or head.nbytes + sum(layers.layer_bytes) <= spare
        spare -= head.peak_bytes()
    layers.fit(spare)
