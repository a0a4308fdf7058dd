"""Where one layer's time goes on the big path: a layer of bench/big.py's 8B-shaped GGUF, step by step.

    python bench/big.py --keep                 # writes /tmp/qkv-bench/8b-32L-q4_0.gguf (and runs it)
    python bench/big_layer.py [--gguf FILE] [--layer 1] [--repeats 3]

Each step is timed alone (wall, user and system CPU and page faults from getrusage), in one process, median of
--repeats, with the page cache of the file dropped before the cold read (posix_fadvise DONTNEED, no root needed):

- read (cold / cached): the layer's stored bytes paged into a fresh memory map (one byte per page touched);
- dequantize, new arrays: qkv's kernels (models.quants) into a new float32 array per tensor (as the reader did);
- dequantize, out=: the same into buffers made once and reused;
- finite check: np.isfinite(W).all() per tensor (a bool array as large as W), and the same as one sum;
- concatenate: [W^q; W^k; W^v] copied into one matrix;
- products: the layer's 7 products for 128 tokens, (W x^T) as models.layers.basic.Linear runs them;
- block: the whole layer's forward (norms, products, RoPE, attention, MLP) with its weights in memory;
- build: the streamed reader's whole step for one layer (prepare_block: read, dequantize, check, fuse).
"""

from __future__ import annotations

import sys

from machine import without_openblas_env

without_openblas_env()  # before NumPy is imported

import argparse  # noqa: E402
import mmap  # noqa: E402
import os  # noqa: E402
import resource  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from functools import partial  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

NAMES = ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down")


def measure(step) -> dict:
    """Wall, user, system seconds and minor + major page faults of step() (this process, getrusage)."""
    r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    step()
    wall, r1 = time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_SELF)
    return dict(wall=wall, user=r1.ru_utime - r0.ru_utime, sys=r1.ru_stime - r0.ru_stime,
                faults=(r1.ru_minflt - r0.ru_minflt) + (r1.ru_majflt - r0.ru_majflt))  # fmt: skip


def median(runs: list[dict]) -> dict:
    return {k: statistics.median(r[k] for r in runs) for k in runs[0]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gguf", type=Path, default=Path("/tmp/qkv-bench/8b-32L-q4_0.gguf"))
    ap.add_argument("--layer", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=128)
    args = ap.parse_args()
    if not args.gguf.is_file():
        sys.exit(f"{args.gguf} not found: python bench/big.py --keep writes it")
    from gguf import GGUFReader

    from qkv_cli.models import load_model
    from qkv_cli.models.quants.dequantize import dequantize

    print(f"machine: {os.cpu_count()} cores, NumPy {np.__version__}; loadavg at start: {loadavg()}")
    reader = GGUFReader(str(args.gguf))  # gguf-py: the offsets, independently of qkv's reader
    infos = {t.name: t for t in reader.tensors}
    layer = [infos[f"blk.{args.layer}.{n}.weight"] for n in NAMES]
    spans = [(int(t.data_offset), int(t.n_bytes), t.tensor_type.name, tuple(int(s) for s in reversed(t.shape)))
             for t in layer]  # fmt: skip
    del reader, infos, layer
    values = sum(int(np.prod(s)) for *_, s in spans)
    print(f"layer {args.layer}: {len(spans)} matrices, {sum(n for _, n, _, _ in spans) / 1e6:.0f} MB stored, "
          f"{values / 1e6:.0f} M values ({values * 4 / 1e6:.0f} MB in float32)")  # fmt: skip

    def fresh_map():
        with open(args.gguf, "rb") as f:
            return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)

    def drop_cache():
        fd = os.open(args.gguf, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)

    def touch(buf):
        for start, n, _, _ in spans:
            np.frombuffer(buf, np.uint8, n, start)[:: mmap.PAGESIZE].sum()

    def raws(buf):
        return [(np.frombuffer(buf, np.uint8, n, start), kind, shape) for start, n, kind, shape in spans]

    results: dict[str, list[dict]] = {}

    def into_outs(raw):
        for r, o in zip(raw, outs, strict=True):
            dequantize(*r, out=o)

    def add(name, step):
        results.setdefault(name, []).append(measure(step))

    outs = [np.empty(shape, np.float32) for *_, shape in spans]
    for o in outs:
        o.fill(0)  # paged in once: the reused buffers
    made: list = []
    m = args.tokens
    rng = np.random.default_rng(0)
    x = np.asfortranarray(rng.standard_normal((m, spans[0][3][1]), dtype=np.float32))  # (m, d), as the forward's
    xd = np.asfortranarray(rng.standard_normal((m, spans[6][3][1]), dtype=np.float32))  # (m, d_ff): W_down's input
    for _ in range(args.repeats):
        drop_cache()
        buf = fresh_map()
        add("read, cold (page cache dropped)", lambda b=buf: touch(b))
        buf = fresh_map()
        add("read, cached (a fresh map)", lambda b=buf: touch(b))
        add("dequantize, new arrays", lambda b=buf: made.extend(dequantize(*r) for r in raws(b)))
        add("dequantize, out= reused", lambda b=buf: into_outs(raws(b)))
        add("finite check, isfinite().all()", lambda: [bool(np.isfinite(w).all()) for w in outs])
        add("finite check, one sum", lambda: [bool(np.isfinite(w.sum())) for w in outs])
        add("concatenate [Wq; Wk; Wv]", lambda: np.concatenate(outs[:3]))
        add("products (7 x W x^T)", lambda: [w @ x.T for w in outs[:6]] + [outs[6] @ xd.T])
        made.clear()
        del buf
    model = load_model(args.gguf, dtype="float32")
    fam, c, p = model.family, model.config, model.params
    build = p.blocks._build  # the streamed reader's step for one layer (bench only: private attributes)
    plain = partial(build.func, getattr(build.args[0], "_w", build.args[0]), *build.args[1:])  # no reused buffers
    for _ in range(args.repeats):
        drop_cache()
        add("build, cold (read + dequantize + check + fuse)", lambda: build(args.layer))
        add("build, cached", lambda: build(args.layer))
        add("build, cached, new arrays (no Buffers)", lambda: plain(args.layer))
    p.blocks._kept[args.layer] = build(args.layer)  # held: the block below reads no weight
    from qkv_cli.models.model import layer_masks

    mask = next(iter(layer_masks(fam, c, m, m, model.dtype)))
    into = np.zeros((c.n_heads, m, m), np.float32)
    for _ in range(args.repeats):
        add("block (whole layer, weights in memory)", lambda: fam.block(p, c, args.layer, x, mask, "vectorized",
                                                                         into=into))  # fmt: skip
    print(f"median of {args.repeats}; loadavg at end: {loadavg()}\n")
    print("| step | wall | user CPU | system CPU | page faults |")
    print("|---|---|---|---|---|")
    for name, runs in results.items():
        r = median(runs)
        print(f"| {name} | {r['wall']:.2f} s | {r['user']:.2f} s | {r['sys']:.2f} s | {r['faults']:,.0f} |")


def loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


if __name__ == "__main__":
    main()
