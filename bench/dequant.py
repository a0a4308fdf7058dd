"""Benchmark: GGUF dequantization speed, qkv against gguf-py's `gguf.quants.dequantize`, on the same tensors.

    python bench/dequant.py                          # Q4_0, Q4_K, Q6_K, Q8_0; a 4096 x 1024 tensor; 9 repeats
    python bench/dequant.py --types Q4_0 Q8_0 --rows 4096 --cols 4096 --repeats 15

Each tensor is random bytes in the type's block layout, its fp16 scales set to finite values (d in 2^-12..2^-4,
as real checkpoints have). In one process, alternating, median of --repeats: qkv's dequantize(raw, kind, shape)
(models/quants/dequantize.py: a new array, as gguf-py returns), the same into a reused float32 buffer (`out=`, as a
layer's weights are read), and gguf.quants.dequantize(raw.reshape(rows, -1), type); first the results are checked equal
bit for bit. Printed: values/s of each and the ratios (target: qkv >= 3x gguf-py), by wall time and by the
calling thread's CPU time (time.thread_time: all three run on that one thread). The machine is shared: when
other processes take the cores, a call's wall time counts the time it waited for one, and the CPU time is the
steadier measure of the work; see the load.
"""

from __future__ import annotations

import sys

from machine import without_openblas_env

without_openblas_env()  # before NumPy is imported

import argparse  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

SCALES = {"Q4_0": (0,), "Q8_0": (0,), "Q4_K": (0, 2), "Q6_K": (208,)}  # byte offsets of each block's fp16 scales


def tensor(kind: str, rows: int, cols: int, rng) -> np.ndarray:
    """[rows * cols / block * nbytes] uint8: random blocks of `kind`, with finite fp16 scales."""
    from qkv_cli.models.quants.dequantize import BY_NAME

    block, nbytes = BY_NAME[kind]
    raw = rng.integers(0, 256, (rows * cols // block, nbytes), dtype=np.uint8)
    for at in SCALES[kind]:
        d = np.exp2(rng.uniform(-12, -4, len(raw))).astype("<f2")
        raw[:, at : at + 2] = d.view(np.uint8).reshape(-1, 2)
    return raw.reshape(-1)


def timed(fn) -> tuple[float, float]:  # -> (wall, CPU time of this thread) of one call, seconds
    t, c = time.perf_counter(), time.thread_time()
    fn()
    return time.perf_counter() - t, time.thread_time() - c


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--types", nargs="+", default=["Q4_0", "Q4_K", "Q6_K", "Q8_0"], choices=sorted(SCALES))
    ap.add_argument("--rows", type=int, default=4096)
    ap.add_argument("--cols", type=int, default=1024)
    ap.add_argument("--repeats", type=int, default=9)
    args = ap.parse_args()
    try:
        import gguf.quants
        from gguf.constants import GGMLQuantizationType
    except ImportError:
        sys.exit("gguf-py is not installed: pip install gguf")
    from threadpoolctl import threadpool_info

    from qkv_cli.models.quants.dequantize import dequantize

    print(f"load average at start: {Path('/proc/loadavg').read_text().split()[:3]}")
    print(f"BLAS: {[(i['internal_api'], i.get('architecture'), i['num_threads']) for i in threadpool_info()]}")
    rng = np.random.default_rng(0)
    shape = (args.rows, args.cols)
    n = args.rows * args.cols
    rows = []
    for kind in args.types:
        raw = tensor(kind, *shape, rng)
        qtype = GGMLQuantizationType[kind]

        def ours(raw=raw, kind=kind):
            return dequantize(raw, kind, shape)

        buffer = np.empty(shape, np.float32)

        def into(raw=raw, kind=kind, buffer=buffer):
            return dequantize(raw, kind, shape, out=buffer)

        def theirs(raw=raw, qtype=qtype):
            return gguf.quants.dequantize(raw.reshape(args.rows, -1), qtype)

        a, b, c = ours(), theirs(), into()
        want = np.asarray(b, np.float32).reshape(shape).view(np.uint32)
        if not (np.array_equal(a.view(np.uint32), want) and np.array_equal(c.view(np.uint32), want)):
            sys.exit(f"{kind}: qkv and gguf-py differ")
        del a, b, c
        times = {"new": [], "out": [], "gguf": []}
        for _ in range(args.repeats):  # alternating, so that a burst of other load hits all three
            for name, fn in (("new", ours), ("out", into), ("gguf", theirs)):
                times[name].append(timed(fn))
        rows.append((kind, times))
    for what, at in (("wall time", 0), ("CPU time", 1)):
        print(
            f"\nby {what}:\n| type | qkv, new array (values/s) | qkv, out= (values/s) | gguf-py (values/s) | "
            "qkv / gguf-py | qkv out= / gguf-py |\n|---|---|---|---|---|---|"
        )
        for kind, times in rows:
            mo, mi, mt = (statistics.median(t[at] for t in times[k]) for k in ("new", "out", "gguf"))
            print(f"| {kind} | {n / mo:,.0f} | {n / mi:,.0f} | {n / mt:,.0f} | {mt / mo:.2f}x | {mt / mi:.2f}x |")
    print(f"{args.rows} x {args.cols} values per tensor, median of {args.repeats}")
    print(f"load average at end: {Path('/proc/loadavg').read_text().split()[:3]}")


if __name__ == "__main__":
    main()
