"""Benchmark: qkv patch on an encoder-decoder against the same patches made with forward hooks on transformers.

    python bench/patch_encdec.py                   # a random T5 (4 + 4 layers, 8 heads, d 256), float64
    python bench/patch_encdec.py --rounds 5 --layers 6 --d 512

What is timed, in one process, float64 on both sides at the same threads (--threads: torch.set_num_threads and
NumPy's BLAS by threadpoolctl), a 23-token source pair (22 words and </s>, the 6th word changed) and a 10-token
decoder input (the start token and 9 words), metric logit-diff:

- qkv cross v: ``pipeline.patch.encdec.patch(..., what=("v",), side="cross")``, what ``qkv patch --attention cross
  --what v`` runs: the two runs once, then each of the L x tau patches from decoder layer l's cached stream, with
  the encoder's output and its K, V kept;
- qkv encoder resid: ``side="encoder", what=("resid",)``: L x n patches, each from encoder layer l + 1 through the
  encoder's remaining layers and the whole decoder;
- transformers: the same patches as forward hooks on transformers' T5 (eager attention), one whole forward of
  both stacks per patch, plus the two runs (the reference tests' method).

The recoveries of both sides are compared within 1e-4: transformers' T5 takes RMSNorm's variance in float32 even
in a float64 model (tests/pipeline/patch/test_encdec_reference.py removes that and holds 1e-8). Rounds alternate
the contenders; medians over rounds; "other load" is the share of the CPUs other processes used while it ran.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
from machine import without_openblas_env  # noqa: E402

without_openblas_env()  # before NumPy is imported

import argparse  # noqa: E402
import statistics  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
from machine import LoadMeter, blas_report, fmt_load, print_header  # noqa: E402

WORDS = "the cat sat on mat a dog ran far and then it slept . , ! le chat est assis sur tapis un chien".split()
SOURCE = "the cat sat on the mat and then it ran far , the dog slept on a mat and then it ran".split()
TARGET = "le chat est assis sur le tapis et un chien".split()


def build(folder: Path, layers: int, d: int, heads: int):
    """A random T5 saved by transformers with a word-level tokenizer.json; returns the float64 transformers model."""
    import torch
    import transformers
    from tokenizers import Tokenizer, models, pre_tokenizers, processors

    vocab = {w: i for i, w in enumerate(["<pad>", "</s>", "<unk>", *dict.fromkeys(WORDS + TARGET)])}
    torch.manual_seed(0)
    config = transformers.T5Config(vocab_size=len(vocab), d_model=d, d_kv=d // heads, d_ff=4 * d,
                                   num_layers=layers, num_heads=heads, decoder_start_token_id=0, pad_token_id=0,
                                   eos_token_id=1)  # fmt: skip
    model = transformers.T5ForConditionalGeneration(config).double().eval()
    model.save_pretrained(folder, safe_serialization=True)
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", 1)])
    tok.save(str(folder / "tokenizer.json"))
    return model


def hooked(model, src_c, src_x, dec, answer, wrong, side: str, L: int, cols: int):  # -> recovery (L, cols)
    """The patches as forward hooks on transformers: cross v (head columns of EncDecAttention.v) or encoder resid
    (one position of encoder.block[l]'s output)."""
    import torch

    def forward(src, hooks=()):
        handles = [m.register_forward_hook(fn) for m, fn in hooks]
        try:
            with torch.no_grad():
                z = model(input_ids=torch.tensor([src]), decoder_input_ids=torch.tensor([dec]), use_cache=False)
        finally:
            for h in handles:
                h.remove()
        z = z.logits[0, -1]
        return float(z[answer] - z[wrong])

    def module(l):
        return model.decoder.block[l].layer[1].EncDecAttention.v if side == "cross" else model.encoder.block[l]

    kept = {}
    forward(src_c, [(module(l), lambda m, a, o, l=l: kept.__setitem__(l, (o[0] if isinstance(o, tuple) else o)))
                    for l in range(L)])  # fmt: skip
    m_c, m_x = forward(src_c), forward(src_x)
    dk = model.config.d_kv
    out = np.empty((L, cols))
    for l in range(L):
        for i in range(cols):

            def patch(mod, args, o, l=l, i=i):
                first = (o[0] if isinstance(o, tuple) else o).clone()
                if side == "cross":
                    first[..., i * dk : (i + 1) * dk] = kept[l][..., i * dk : (i + 1) * dk]
                else:
                    first[0, i] = kept[l][0, i]
                return (first, *o[1:]) if isinstance(o, tuple) else first

            out[l, i] = forward(src_x, [(module(l), patch)])
    return (out - m_x) / (m_c - m_x)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--d", type=int, default=256)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2, help="torch's threads and NumPy's BLAS threads (threadpoolctl)")
    args = ap.parse_args()
    import torch
    from threadpoolctl import threadpool_limits

    threadpool_limits(args.threads, user_api="blas")  # the same threads on both sides
    torch.set_num_threads(args.threads)

    from qkv_cli.models import load_model
    from qkv_cli.pipeline.patch.encdec import patch

    blas_report()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    clean = " ".join(SOURCE)
    corrupted = " ".join(SOURCE[:5] + ["dog"] + SOURCE[6:])
    target = " ".join(TARGET[:-1])
    with tempfile.TemporaryDirectory() as tmp:
        ref = build(Path(tmp), args.layers, args.d, args.heads)
        model = load_model(tmp, dtype="float64")
        src_c, src_x = list(model.tokenize(clean).ids), list(model.tokenize(corrupted).ids)
        dec = [model.start_id, *model.tokenize(target, special=False).ids]
        answer, wrong = model.tokenize("un", special=False).ids[0], model.tokenize("le", special=False).ids[0]
        n, L, tau = len(src_c), args.layers, args.heads
        contenders = {
            "qkv cross v": lambda: patch(model, clean, corrupted, target, "un", "le", ("v",),
                                         side="cross").recovery["v"],
            "transformers cross v": lambda: hooked(ref, src_c, src_x, dec, answer, wrong, "cross", L, tau),
            "qkv encoder resid": lambda: patch(model, clean, corrupted, target, "un", "le", ("resid",),
                                               side="encoder").recovery["resid"],
            "transformers encoder resid": lambda: hooked(ref, src_c, src_x, dec, answer, wrong, "encoder", L, n),
        }  # fmt: skip
        times = {k: [] for k in contenders}
        got = {}
        meter = LoadMeter().start()
        for _ in range(args.rounds):
            for name, call in contenders.items():
                t = time.perf_counter()
                got[name] = call()
                times[name].append(time.perf_counter() - t)
        load = meter.stop()
    for what in ("cross v", "encoder resid"):
        np.testing.assert_allclose(got[f"qkv {what}"], got[f"transformers {what}"], atol=1e-4, rtol=0)
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"random T5: {L} + {L} layers, tau = {tau}, d = {args.d}, float64; source n = {n}, decoder m = {len(dec)}; "
          f"medians of {args.rounds} rounds")  # fmt: skip
    print_header(["sweep", "patches", "qkv", "transformers + hooks", "qkv / transformers", "other load"])
    for what, count in (("cross v", L * tau), ("encoder resid", L * n)):
        q, t = med[f"qkv {what}"], med[f"transformers {what}"]
        print(f"| {what} | {count} | {q:.2f} s | {t:.2f} s | {q / t:.2f} | {fmt_load(load)} |")


if __name__ == "__main__":
    main()
