"""Benchmark: CLI start-up wall time against ``python -c "import numpy"``.

    python bench/startup.py            # median of 7 rounds, after 1 warm-up round
    python bench/startup.py --runs 3

Each command runs in a fresh subprocess (the ``qkv`` script next to this Python interpreter) from a temporary
directory, so files it writes (heatmap.png) land there. A command that fails is reported with the end of its
stderr instead of stopping the benchmark. Targets (issue 6): ``qkv shapes --d 512 --tau 8`` and ``qkv --help``
within 1.3x of ``import numpy``, ``qkv run "a short sentence"`` within 2x; ``qkv heatmap`` is reported.
Issue 11: a default 8-head heatmap of one sentence within 1.6x of importing matplotlib's object API (``Figure`` and
the Agg canvas) plus NumPy, which is the baseline of that row ("/ base" column). Rounds alternate the commands, so a
command and its baseline are timed side by side; the subprocesses run without PYTHONDONTWRITEBYTECODE (see
machine.cold_env), so qkv's bytecode is compiled once, as an installed package's is.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from machine import cold_env


def qkv_command() -> list[str]:
    """The qkv entry point installed next to sys.executable, else ``python -m qkv_cli``."""
    bindir = Path(sys.executable).parent
    for name in ("qkv", "qkv.exe"):
        if (bindir / name).exists():
            return [str(bindir / name)]
    found = shutil.which("qkv", path=str(bindir))
    return [found] if found else [sys.executable, "-m", "qkv_cli"]


NUMPY = 'python -c "import numpy"'
MPL = "python -c import numpy, Figure, FigureCanvasAgg"
SENTENCE = "The animal didn't cross the street because it was too tired."


def commands() -> list[tuple[str, list[str], float | None, str]]:  # (label, argv, target ratio, baseline label)
    py, qkv = sys.executable, qkv_command()
    mpl = ("import numpy; from matplotlib.figure import Figure; "
           "from matplotlib.backends.backend_agg import FigureCanvasAgg")  # fmt: skip
    return [
        ('python -c "pass"', [py, "-c", "pass"], None, NUMPY),
        (NUMPY, [py, "-c", "import numpy"], None, NUMPY),
        (MPL, [py, "-c", mpl], None, MPL),
        ("qkv --help", [*qkv, "--help"], 1.3, NUMPY),
        ("qkv shapes --d 512 --tau 8", [*qkv, "shapes", "--d", "512", "--tau", "8"], 1.3, NUMPY),
        ('qkv run "a short sentence"', [*qkv, "run", "a short sentence"], 2.0, NUMPY),
        ("qkv heatmap --out heatmap.png", [*qkv, "heatmap", "--out", "heatmap.png"], None, NUMPY),
        (
            "qkv heatmap SENTENCE --heads 8 (8 panels)",
            [*qkv, "heatmap", SENTENCE, "--heads", "8", "--out", "h8.png"],
            1.6,
            MPL,
        ),
    ]


def run_once(argv, cwd, env) -> tuple[float, subprocess.CompletedProcess]:
    t0 = time.perf_counter()
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    return time.perf_counter() - t0, done


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=7, help="timed rounds, each running every command (default 7; median)")
    args = p.parse_args(argv)
    env = cold_env(MPLBACKEND="Agg", COLUMNS="120")
    print(f"python {sys.version.split()[0]} at {sys.executable}; qkv = {' '.join(qkv_command())}")
    print(f"median of {args.runs} rounds after 1 warm-up run (shown as 'first'); each round runs every command once, "
          "so a command and its baseline are timed side by side\n")  # fmt: skip
    firsts, times, failed = {}, {label: [] for label, *_ in commands()}, {}
    with tempfile.TemporaryDirectory() as cwd:
        for round_ in range(args.runs + 1):
            for label, cmd, _, _ in commands():
                if label in failed:
                    continue
                try:
                    t, done = run_once(cmd, cwd, env)
                except (OSError, subprocess.TimeoutExpired) as exc:
                    failed[label] = f"could not run: {exc}"
                    continue
                if done.returncode != 0:
                    tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or [""]
                    failed[label] = f"FAILED (exit {done.returncode}): {tail[0][:100]}"
                elif round_ == 0:
                    firsts[label] = t
                else:
                    times[label].append(t)
    results = []
    for label, _, target, _ in commands():
        median = statistics.median(times[label]) if times[label] and label not in failed else None
        results.append((label, median, firsts.get(label), target, failed.get(label, "")))
    medians = {r[0]: r[1] for r in results}
    baselines = {label: b for label, _, _, b in commands()}
    print("| command | median s | first s | / base | base | target | |")
    print("|---|---|---|---|---|---|---|")
    for label, median, first, target, note in results:
        base = medians.get(baselines[label])
        ratio = f"{median / base:.2f}" if median and base else "-"
        verdict = note
        if not note and target is not None and base:
            verdict = "met" if median / base <= target else "MISSED"
        cells = [
            label,
            f"{median:.3f}" if median else "-",
            f"{first:.3f}" if first else "-",
            ratio,
            "matplotlib + numpy" if baselines[label] == MPL else "import numpy",
            f"<= {target}x" if target else "",
            verdict,
        ]
        print("| " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
