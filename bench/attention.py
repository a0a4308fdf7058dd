"""Benchmark: qkv's attention kernels against PyTorch computing (and keeping) the same weights.

    python bench/attention.py            # the full table: m = 16 .. 4096, float32 and float64, causal and none
    python bench/attention.py --quick    # a smoke run: a few sizes, float32, 3 repetitions

Contenders, all computing out = Softmax(Q K^T * scale + Mask) V AND keeping the weights (tau, m, m):
- qkv kernels: ``qkv_cli.core.kernels.attention(Q, K, V, mask, kernel=...)`` for every kernel in ``KERNELS``
  (the loop kernel only up to --loop-max);
- torch plain: ``w = torch.softmax(Q @ K^T * scale + mask, -1); out = w @ V`` (no autograd);
- torch MHA: ``nn.MultiheadAttention(need_weights=True, average_attn_weights=False)`` with identity projection
  weights and no bias, fed Q, K, V laid out as (1, m, tau d_k). "MHA full" times the whole forward, which also
  runs the three input projections and the output projection (d x d matmuls). "MHA attn" times the same forward
  with ``torch.nn.functional.linear`` replaced by the identity for the call (exact here: the weights are
  identities), i.e. only MHA's own attention (scaled baddbmm with the mask, softmax, bmm, head reshapes).
  Ratios and the target use "MHA attn".

Same threads for everyone, in one process: torch.set_num_threads(T), BLAS held to T threads by threadpoolctl,
and the vectorized kernel's own min(T, 2) Python threads (BLAS at 1 thread inside them). --threads 1 compares
one core's work: on a machine shared with other processes, the steadier comparison (two threads there measure
how each library copes with waiting for a core as much as its work); it also prints each contender's median CPU
time on the calling thread, which then does all of its work. Each contender runs in its own
phase (1 warm-up call, then --reps timed calls, median), with a pause between phases so that threads still
spinning from the previous library (OpenBLAS, OpenMP) do not steal cores from the next. Before timing, every
contender's output and weights are checked against torch plain.

"other load" is the share of all CPUs that other processes used just before the row was timed (from
/proc/stat): on a shared machine, rows timed under load are not comparable (--wait-quiet waits for a lull).

Peak memory: tracemalloc's peak during one ``attention()`` call (NumPy reports its allocations to it; the
inputs exist before and are not counted), divided by the size of the returned weights.

OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE, when set, are removed for this process only (the script re-executes
itself before importing NumPy); --keep-openblas-env keeps them. The BLAS core threadpoolctl reports is printed.
"""

from __future__ import annotations

import argparse
import os
import sys
from functools import partial

_OPENBLAS_VARS = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")


def _parse(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="m in 16 128 512 2048, float32, 3 repetitions")
    p.add_argument("--m", type=int, nargs="+", help="query/key lengths (default 16 .. 4096)")
    p.add_argument("--dtype", nargs="+", choices=["float32", "float64"], help="default: both")
    p.add_argument("--mask", nargs="+", choices=["causal", "none"], default=["causal", "none"])
    p.add_argument("--heads", type=int, default=8, help="tau (default 8)")
    p.add_argument("--dk", type=int, default=64, help="d_k (default 64)")
    p.add_argument("--reps", type=int, help="timed calls per contender (default 7; median)")
    p.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="phases per contender, alternating (default 1); the median is over all rounds' calls",
    )
    p.add_argument(
        "--threads", type=int, default=2, help="torch, BLAS and qkv kernel threads (default 2; 1: one core each)"
    )
    p.add_argument("--loop-max", type=int, default=512, help="largest m for the loop kernel (default 512)")
    p.add_argument("--memory-m", type=int, nargs="*", help="m for the peak-memory table (default 2048 4096)")
    p.add_argument("--pause", type=float, default=0.25, help="seconds of rest between phases (default 0.25)")
    p.add_argument(
        "--wait-quiet",
        type=float,
        default=0,
        help="before each row, wait up to this many seconds "
        "for other processes to use < 15%% of the CPUs (Linux; default 0: do not wait)",
    )
    p.add_argument("--no-torch", action="store_true", help="time the qkv kernels only")
    p.add_argument("--keep-openblas-env", action="store_true", help="do not unset OPENBLAS_CORETYPE/L2_SIZE")
    args = p.parse_args(argv)
    if args.quick:
        args.m = args.m or [16, 128, 512, 2048]
        args.dtype = args.dtype or ["float32"]
        args.reps = args.reps or 3
        args.memory_m = [2048] if args.memory_m is None else args.memory_m
    args.m = args.m or [16, 32, 64, 128, 256, 512, 1024, 2048, 4096]
    args.dtype = args.dtype or ["float32", "float64"]
    args.reps = args.reps or 7
    args.memory_m = [2048, 4096] if args.memory_m is None else args.memory_m
    return args


def background_load(interval=0.2):  # -> share of all CPUs other processes used meanwhile, or None off Linux
    """How busy the machine is without us: busy CPU time in /proc/stat minus this process's own (its BLAS and
    OpenMP threads may still be spinning) over ``interval`` seconds, as a fraction of all CPUs."""
    import time

    def sample():
        with open("/proc/stat") as f:
            ticks = [int(x) for x in f.readline().split()[1:]]
        return ticks[3] + ticks[4], sum(ticks), time.process_time()  # idle + iowait, total, our CPU seconds

    try:
        idle0, total0, own0 = sample()
        time.sleep(interval)
        idle1, total1, own1 = sample()
    except (OSError, ValueError, IndexError):
        return None
    hz = os.sysconf("SC_CLK_TCK")
    busy = (total1 - total0) - (idle1 - idle0) - (own1 - own0) * hz
    return min(1.0, max(0.0, busy / max(1, total1 - total0)))


def wait_quiet(seconds, limit=0.15):  # -> the last background load seen
    import time

    deadline = time.monotonic() + seconds
    load = background_load()
    while load is not None and load > limit and time.monotonic() < deadline:
        load = background_load()
    return load


def _reexec_without_openblas_env(args):
    """Drop OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE by re-executing before NumPy is imported."""
    found = [v for v in _OPENBLAS_VARS if v in os.environ]
    if args.keep_openblas_env and found:
        return "nothing, kept by --keep-openblas-env: " + ", ".join(f"{v}={os.environ[v]}" for v in found)
    if not found:
        return os.environ.get("QKV_BENCH_UNSET", "")
    env = {k: v for k, v in os.environ.items() if k not in _OPENBLAS_VARS}
    env["QKV_BENCH_UNSET"] = ", ".join(f"{v}={os.environ[v]}" for v in found)
    os.execve(sys.executable, [sys.executable, *sys.argv], env)


def main(argv=None):
    args = _parse(sys.argv[1:] if argv is None else argv)
    unset = _reexec_without_openblas_env(args)

    import gc
    import statistics
    import time
    import tracemalloc

    import numpy as np

    from qkv_cli.core import kernels, threads
    from qkv_cli.core.masks import MaskSpec, additive

    def build_mask(m, causal, dtype):  # [m, m] 0 / -inf under the causal rule, else None
        return additive(MaskSpec(causal=causal), m, dtype=dtype)

    try:
        from threadpoolctl import threadpool_info, threadpool_limits
    except ImportError:
        sys.exit("bench/attention.py needs threadpoolctl: pip install threadpoolctl (or .[bench])")
    torch = None
    if not args.no_torch:
        try:
            import torch
        except ImportError:
            print("torch is not installed: timing the qkv kernels only")

    threadpool_limits(args.threads, user_api="blas")  # the whole process: numpy's BLAS at T threads
    threads.THREADS = max(1, min(threads.THREADS, args.threads))  # the vectorized kernel's Python threads
    if torch is not None:
        torch.set_num_threads(args.threads)

    print("# environment")
    print(f"python {sys.version.split()[0]}, numpy {np.__version__}, cpus {os.cpu_count()}, threads {args.threads}")
    print(f"unset for this process: {unset or 'nothing (OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE not set)'}")
    for lib in threadpool_info():
        print(
            f"{lib.get('user_api')}: {lib.get('internal_api')} {lib.get('version')}, "
            f"core {lib.get('architecture', '?')}, {lib.get('threading_layer', '?')} threading, "
            f"{lib.get('num_threads')} threads ({os.path.basename(lib.get('filepath', ''))})"
        )
    print(f"qkv vectorized kernel: {threads.THREADS} Python threads (BLAS at 1 thread inside them)")
    if torch is not None:
        cap = getattr(getattr(torch.backends, "cpu", None), "get_cpu_capability", lambda: "?")()
        print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, cpu capability {cap}")
    rounds = f" x {args.rounds} alternating rounds" if args.rounds > 1 else ""
    print(
        f"tau={args.heads} d_k={args.dk} scale=1/sqrt(d_k), median of {args.reps}{rounds} timed calls, "
        "each phase after 1 warm-up"
    )

    def timed(fn, times, cpu):  # one phase: pause, 1 warm-up call, --reps timed calls appended to times (wall), cpu
        time.sleep(args.pause)
        fn()
        for _ in range(args.reps):
            t0, c0 = time.perf_counter(), time.thread_time()
            fn()
            times.append(time.perf_counter() - t0)
            cpu.append(time.thread_time() - c0)

    rng = np.random.default_rng(0)
    tau, dk = args.heads, args.dk
    scale = 1.0 / np.sqrt(dk)
    rows = []
    for dtype_name in args.dtype:
        dtype = np.dtype(dtype_name)
        tol = 2e-4 if dtype == np.float32 else 1e-10
        for mask_kind in args.mask:
            for m in args.m:
                Q, K, V = (rng.standard_normal((tau, m, dk)).astype(dtype) for _ in range(3))
                mask = build_mask(m, causal=mask_kind == "causal", dtype=dtype)
                load = wait_quiet(args.wait_quiet)
                contenders = {}
                for name in kernels.KERNELS:
                    if name == "loop" and m > args.loop_max:
                        continue
                    contenders[name] = partial(kernels.attention, Q, K, V, mask, kernel=name)
                if torch is not None:
                    contenders.update(_torch_contenders(torch, Q, K, V, mask, scale))
                expected = None
                if torch is not None:
                    with torch.inference_mode():
                        out_t, w_t = contenders["torch plain"]()
                        expected = (out_t.numpy(), w_t.numpy())
                    for name, fn in contenders.items():
                        with torch.inference_mode():
                            out, w = fn()
                        out, w = np.asarray(out), np.asarray(w)
                        for what, got, want in (("out", out, expected[0]), ("weights", w, expected[1])):
                            err = float(np.max(np.abs(got - want)))
                            if not err <= tol:
                                sys.exit(f"{name} {what} differ from torch plain by {err:g} ({dtype_name}, m={m})")
                del expected
                gc.collect()
                samples = {name: [] for name in contenders}
                cpu = {name: [] for name in contenders}  # this thread's CPU time: all of the work at --threads 1
                for _ in range(args.rounds):  # rounds alternate the contenders' phases: slow drifts hit all
                    for name, fn in contenders.items():
                        if torch is not None:
                            with torch.inference_mode():
                                timed(fn, samples[name], cpu[name])
                        else:
                            timed(fn, samples[name], cpu[name])
                        gc.collect()
                times = {name: statistics.median(values) for name, values in samples.items()}
                times["load"] = load
                times["cpu"] = {name: statistics.median(values) for name, values in cpu.items()}
                rows.append((dtype_name, mask_kind, m, times))
                _print_row(rows[-1], header=len(rows) == 1)
    print()
    _print_table(rows)
    if args.threads == 1:
        _print_cpu_table(rows)
    if args.memory_m:
        _memory(args, np, kernels, build_mask, tracemalloc, rng)


def _torch_contenders(torch, Q, K, V, mask, scale):
    """torch plain, nn.MultiheadAttention (identity projections) and its four projections alone."""
    import torch.nn.functional as F

    tQ, tK, tV = (torch.from_numpy(x) for x in (Q, K, V))
    tmask = None if mask is None else torch.from_numpy(mask)

    def plain():
        scores = tQ @ tK.transpose(-1, -2) * scale
        if tmask is not None:
            scores = scores + tmask
        w = torch.softmax(scores, dim=-1)
        return w @ tV, w

    tau, m, dk = Q.shape
    E = tau * dk
    dtype = tQ.dtype
    mha = torch.nn.MultiheadAttention(E, tau, bias=False, batch_first=True, dtype=dtype)
    eye = torch.eye(E, dtype=dtype)
    with torch.no_grad():
        mha.in_proj_weight.copy_(torch.cat([eye, eye, eye]))
        mha.out_proj.weight.copy_(eye)
    mha.eval()

    def heads_to_model(x):  # (tau, m, dk) -> (1, m, tau dk): head j in columns j dk .. (j+1) dk
        return x.permute(1, 0, 2).reshape(1, x.shape[1], E).contiguous()

    xq, xk, xv = heads_to_model(tQ), heads_to_model(tK), heads_to_model(tV)

    def mha_full():
        out, w = mha(xq, xk, xv, attn_mask=tmask, need_weights=True, average_attn_weights=False)
        return out.reshape(m, tau, dk).permute(1, 0, 2), w[0]

    def mha_attn():  # the same forward with its four projections (identities here) skipped
        real = F.linear
        F.linear = _identity_linear  # multi_head_attention_forward looks ``linear`` up in F at call time
        try:
            return mha_full()
        finally:
            F.linear = real

    return {"torch plain": plain, "MHA attn": mha_attn, "MHA full": mha_full}


def _identity_linear(x, weight, bias=None):  # F.linear for an identity weight and no bias: x itself
    return x


def _target(m):
    if m >= 1024:
        return 0.5
    if m >= 512:
        return 1.0
    return 2.0


def _fmt_ms(t):
    return "-" if t is None else (f"{t * 1e3:.3f}" if t < 0.1 else f"{t * 1e3:.1f}")


def _ratio(a, b):
    return "-" if a is None or b is None else f"{a / b:.2f}"


_COLUMNS = (
    "dtype",
    "mask",
    "m",
    "torch plain ms",
    "MHA attn ms",
    "MHA full ms",
    "vectorized ms",
    "loop ms",
    "vec/plain",
    "vec/MHA attn",
    "loop/vec",
    "f32 target vec/plain",
    "other load",
)


def _cells(row):
    dtype_name, mask_kind, m, t = row
    vec, plain, mha = t.get("vectorized"), t.get("torch plain"), t.get("MHA attn")
    target = ""
    if dtype_name == "float32" and plain is not None and vec is not None:
        goal = _target(m)
        met = vec / plain <= goal and (mha is None or vec < mha)
        target = f"<= {goal} and < MHA: {'met' if met else 'MISSED'}"
    return (
        dtype_name,
        mask_kind,
        str(m),
        _fmt_ms(plain),
        _fmt_ms(mha),
        _fmt_ms(t.get("MHA full")),
        _fmt_ms(vec),
        _fmt_ms(t.get("loop")),
        _ratio(vec, plain),
        _ratio(vec, mha),
        _ratio(t.get("loop"), vec),
        target,
        "?" if t.get("load") is None else f"{t['load']:.0%}",
    )


def _print_row(row, header):
    if header:
        print("\n# progress")
    print("  ".join(_cells(row)), flush=True)


def _print_cpu_table(rows):  # --threads 1: every contender works on the calling thread, so its CPU time is the work
    print("\n# one thread: median CPU time of the calling thread (steadier than wall time on a shared machine)")
    print("| dtype | mask | m | torch plain ms | MHA attn ms | vectorized ms | vec/plain | vec/MHA attn |")
    print("|---|---|---|---|---|---|---|---|")
    for dtype_name, mask_kind, m, t in rows:
        c = t["cpu"]
        vec, plain, mha = c.get("vectorized"), c.get("torch plain"), c.get("MHA attn")
        cells = (_fmt_ms(plain), _fmt_ms(mha), _fmt_ms(vec), _ratio(vec, plain), _ratio(vec, mha))
        print(f"| {dtype_name} | {mask_kind} | {m} | " + " | ".join(cells) + " |")


def _print_table(rows):
    print("# attention: median wall time, and ratios (< 1: qkv faster)")
    print("| " + " | ".join(_COLUMNS) + " |")
    print("|" + "|".join("---" for _ in _COLUMNS) + "|")
    for row in rows:
        print("| " + " | ".join(_cells(row)) + " |")


def _memory(args, np, kernels, build_mask, tracemalloc, rng):
    print("\n# peak memory of one attention() call (tracemalloc), vectorized kernel")
    print("| dtype | mask | m | weights MB | peak MB | peak / weights | (peak - weights - out) / weights |")
    print("|---|---|---|---|---|---|---|")
    for dtype_name in args.dtype:
        dtype = np.dtype(dtype_name)
        for mask_kind in args.mask:
            for m in args.memory_m:
                Q, K, V = (rng.standard_normal((args.heads, m, args.dk)).astype(dtype) for _ in range(3))
                mask = build_mask(m, causal=mask_kind == "causal", dtype=dtype)
                tracemalloc.start()
                tracemalloc.reset_peak()
                out, w = kernels.attention(Q, K, V, mask)
                peak = tracemalloc.get_traced_memory()[1]
                tracemalloc.stop()
                extra = (peak - w.nbytes - out.nbytes) / w.nbytes
                print(
                    f"| {dtype_name} | {mask_kind} | {m} | {w.nbytes / 2**20:.0f} | {peak / 2**20:.1f} | "
                    f"{peak / w.nbytes:.3f} | {extra:.4f} |"
                )
                del out, w


if __name__ == "__main__":
    main()
