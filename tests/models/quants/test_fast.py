"""The fast kernels' scratch buffers are per thread: two threads dequantizing at once (a layer read ahead while
the pass computes) get gguf-py's bits each, chunk sizes changing between calls included."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from helpers import reference_import

from qkv_cli.models.quants import dequantize as quants
from qkv_cli.models.quants.dequantize import dequantize
from qkv_cli.models.quants.fast import KERNELS

SCALES = {"Q4_0": (0,), "Q8_0": (0,), "Q4_K": (0, 2), "Q6_K": (208,)}  # byte offsets of each block's fp16 scales


def random_blocks(rng, kind, n):  # [n * nbytes] uint8: random blocks of kind, finite fp16 scales
    raw = rng.integers(0, 256, (n, quants.BY_NAME[kind][1]), dtype=np.uint8)
    for at in SCALES[kind]:
        raw[:, at : at + 2] = rng.normal(0, 0.1, n).astype("<f2").view(np.uint8).reshape(n, 2)
    return raw.reshape(-1)


@pytest.mark.reference
def test_two_threads_at_once_each_get_gguf_bits(monkeypatch):
    gguf = reference_import("gguf")
    monkeypatch.setattr(quants, "CHUNK_BYTES", 7 * 210)  # many chunks, uneven for every type
    rng = np.random.default_rng(5)
    cases = []
    for kind in KERNELS:
        block, _ = quants.BY_NAME[kind]
        for rows in (64, 9):  # a larger tensor, then a smaller one: scratch reused at another size
            raw = random_blocks(rng, kind, rows * 4)
            want = gguf.quants.dequantize(raw.reshape(rows, -1), gguf.GGMLQuantizationType[kind])
            cases.append((kind, raw, (rows, 4 * block), want))
    results = {}

    def work(name):
        for i, (kind, raw, shape, _) in enumerate(cases * 3):
            results[name, i] = dequantize(raw, kind, shape)

    workers = [threading.Thread(target=work, args=(name,)) for name in "ab"]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    assert len(results) == 2 * 3 * len(cases)
    for (_, i), got in results.items():
        want = cases[i % len(cases)][3]
        assert got.shape == want.shape
        np.testing.assert_array_equal(got.view(np.uint32), np.asarray(want, np.float32).view(np.uint32))
