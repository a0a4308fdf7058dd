"""Benchmark: GGUF dequantization speed, qkv against gguf-py's `gguf.quants.dequantize`, on the same tensors.

    python bench/dequant.py                          # Q4_0, Q4_K, Q6_K, Q8_0; a 4096 x 1024 tensor; 9 repeats
    python bench/dequant.py --types Q4_0 Q8_0 --rows 4096 --cols 4096 --repeats 15
    python bench/dequant.py --gguf FILE.gguf         # every tensor of those types in a real checkpoint
    python bench/dequant.py --processes 5            # five fresh processes: each ratio's median, lowest, highest

Each synthetic tensor is random bytes in the type's block layout, its fp16 scales set to finite values (d in
2^-12..2^-4, as real checkpoints have); with --gguf, the file's own tensors of each type (read with gguf-py's
GGUFReader into memory), timed together. In one process, alternating, median of --repeats: qkv's
dequantize(raw, kind, shape) (models/quants/dequantize.py: a new array, as gguf-py returns), the same into a reused
float32 buffer (`out=`, as a layer's weights are read), and gguf.quants.dequantize(blocks, type); first the results
are checked equal bit for bit, for every type before any is timed. Printed: values/s of each and the ratios
(target: qkv >= 3x gguf-py), by wall time and by the calling thread's CPU time (time.thread_time: all three run on
that one thread). With --processes N, N fresh processes in turn, each measuring as above: values/s are the median of
their medians, and each ratio is followed by the lowest and highest process's (on this machine a ratio moves by up
to a third from one process to the next). The machine is shared: when other processes take the cores, a call's
wall time counts the time it waited for one, and the CPU time is the steadier measure of the work; see the load.
"""

from __future__ import annotations

import sys

from machine import without_openblas_env

without_openblas_env()  # before NumPy is imported

import argparse  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

from qkv_cli.models.quants.dequantize import BY_NAME  # noqa: E402

SCALES = {"Q4_0": (0,), "Q8_0": (0,), "Q4_K": (0, 2), "Q6_K": (208,)}  # byte offsets of each block's fp16 scales


def tensor(kind: str, rows: int, cols: int, rng) -> np.ndarray:
    """[rows * cols / block * nbytes] uint8: random blocks of `kind`, with finite fp16 scales."""
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


def synthetic(kinds, rows: int, cols: int) -> dict:  # -> {kind: [(raw, shape, blocks for gguf-py)]}
    rng = np.random.default_rng(0)
    made = {}
    for kind in kinds:
        raw = tensor(kind, rows, cols, rng)
        made[kind] = [(raw, (rows, cols), raw.reshape(rows, -1))]
    return made


def from_file(path: Path, kinds) -> dict:  # -> {kind: [(raw, shape, blocks)]}: the file's tensors of those types
    from gguf import GGUFReader

    found = {}
    for t in GGUFReader(path).tensors:
        if t.tensor_type.name in kinds:
            blocks = np.array(t.data)  # in memory: the page cache is not what is measured
            shape = tuple(int(x) for x in reversed(t.shape))
            found.setdefault(t.tensor_type.name, []).append((blocks.reshape(-1), shape, blocks))
    return found


def measure(args) -> list[dict]:  # -> per type: its values, tensors and median seconds (wall, CPU) of each
    try:
        import gguf.quants
        from gguf.constants import GGMLQuantizationType
    except ImportError:
        sys.exit("gguf-py is not installed: pip install gguf")
    from threadpoolctl import threadpool_info

    from qkv_cli.models.quants.dequantize import dequantize

    if not args.json:
        print(f"BLAS: {[(i['internal_api'], i.get('architecture'), i['num_threads']) for i in threadpool_info()]}")
    tensors = from_file(args.gguf, args.types) if args.gguf else synthetic(args.types, args.rows, args.cols)
    calls = []
    for kind, group in tensors.items():  # every type checked (and so warmed up) before any is timed: the
        qtype = GGMLQuantizationType[kind]  # allocator's state after the first large arrays would favour the later
        count = sum(raw.size // BY_NAME[kind][1] * BY_NAME[kind][0] for raw, _, _ in group)
        buffer = np.empty(max(np.prod(shape) for _, shape, _ in group), np.float32)

        def ours(group=group, kind=kind):
            return [dequantize(raw, kind, shape) for raw, shape, _ in group]

        def into(group=group, kind=kind, buffer=buffer):
            for raw, shape, _ in group:
                dequantize(raw, kind, shape, out=buffer[: np.prod(shape)].reshape(shape))

        def theirs(group=group, qtype=qtype):
            return [gguf.quants.dequantize(blocks, qtype) for _, _, blocks in group]

        for (raw, shape, _), a, b in zip(group, ours(), theirs(), strict=True):
            want = np.asarray(b, np.float32).reshape(shape).view(np.uint32)
            c = dequantize(raw, kind, shape, out=buffer[: np.prod(shape)].reshape(shape))
            if not (np.array_equal(a.view(np.uint32), want) and np.array_equal(c.view(np.uint32), want)):
                sys.exit(f"{kind}: qkv and gguf-py differ")
        calls.append((kind, count, len(group), (("new", ours), ("out", into), ("gguf", theirs))))
    rows = []
    for kind, count, n_tensors, fns in calls:
        times = {"new": [], "out": [], "gguf": []}
        for _ in range(args.repeats):  # alternating, so that a burst of other load hits all three
            for name, fn in fns:
                times[name].append(timed(fn))
        medians = {k: [statistics.median(t[at] for t in v) for at in (0, 1)] for k, v in times.items()}
        rows.append({"kind": kind, "values": count, "tensors": n_tensors, "seconds": medians})
    return rows


def report(runs: list[list[dict]]) -> None:
    """Markdown tables: values/s (the median over runs of each run's median) and qkv / gguf-py, with the lowest
    and highest run's ratio in brackets when there are several runs."""

    def ratio(values):
        mid = f"{statistics.median(values):.2f}x"
        return mid if len(values) == 1 else f"{mid} ({min(values):.2f}-{max(values):.2f})"

    for what, at in (("wall time", 0), ("CPU time", 1)):
        print(
            f"\nby {what}:\n| type | tensors | values | qkv, new array (values/s) | qkv, out= (values/s) | "
            "gguf-py (values/s) | qkv / gguf-py | qkv out= / gguf-py |\n|---|---|---|---|---|---|---|---|"
        )
        for i, first in enumerate(runs[0]):
            rows = [run[i]["seconds"] for run in runs]
            n = first["values"]
            speed = {k: statistics.median(n / r[k][at] for r in rows) for k in ("new", "out", "gguf")}
            new, out = (ratio([r["gguf"][at] / r[k][at] for r in rows]) for k in ("new", "out"))
            print(
                f"| {first['kind']} | {first['tensors']} | {n:,} | {speed['new']:,.0f} | {speed['out']:,.0f} "
                f"| {speed['gguf']:,.0f} | {new} | {out} |"
            )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--types", nargs="+", default=["Q4_0", "Q4_K", "Q6_K", "Q8_0"], choices=sorted(SCALES))
    ap.add_argument("--rows", type=int, default=4096)
    ap.add_argument("--cols", type=int, default=1024)
    ap.add_argument("--gguf", type=Path, default=None, help="time this file's tensors instead of random ones")
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument(
        "--processes", type=int, default=1, help="measure in this many fresh processes, one after the other"
    )
    ap.add_argument("--json", action="store_true", help=argparse.SUPPRESS)  # one process's medians, for --processes
    args = ap.parse_args()
    if args.processes < 1:
        ap.error("--processes must be 1 or more")
    if args.json:
        print(json.dumps(measure(args)))
        return
    print(f"load average at start: {Path('/proc/loadavg').read_text().split()[:3]}")
    runs = [measure(args)] if args.processes == 1 else []
    child = ["--types", *args.types, "--rows", str(args.rows), "--cols", str(args.cols), "--repeats", str(args.repeats)]
    child += ["--gguf", str(args.gguf)] if args.gguf else []
    for _ in range(args.processes if args.processes > 1 else 0):  # each a fresh interpreter and C allocator
        done = subprocess.run([sys.executable, __file__, *child, "--json"], capture_output=True, text=True)
        if done.returncode:
            sys.exit(done.stderr.strip() or done.stdout.strip())
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    report(runs)
    what = args.gguf or f"{args.rows} x {args.cols} values per tensor"
    print(f"{what}, {len(runs)} process(es), median of {args.repeats} in each")
    print(f"load average at end: {Path('/proc/loadavg').read_text().split()[:3]}")


if __name__ == "__main__":
    main()
