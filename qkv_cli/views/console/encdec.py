"""An encoder-decoder writing (`qkv generate --model T5|BART|MARIAN`): per written token, its probability and the
source tokens its cross-attention read most (the alignment), as a table, JSON or NPZ."""

from __future__ import annotations

import sys

import numpy as np

from qkv_cli.views.console import clean

TOP = 3  # source tokens shown per written token


def alignment(result, layer: int | None, heads) -> np.ndarray:  # -> [steps, n]
    """Each step's cross-attention row in `layer` (default the last), averaged over `heads`."""
    rows = result.step_attentions  # (steps, L_dec, tau, n)
    at = rows.shape[1] - 1 if layer is None else layer
    return rows[:, at][:, heads].mean(axis=1)


def steps(result, layer: int | None, heads) -> list[dict]:
    """One dict per written token: step, token, id, prob, and "read": the TOP source tokens (at: their position)
    its cross-attention (decoder layer `layer`, default the last, mean over `heads`) read most, with weights."""
    source, align = list(result.context.labels), alignment(result, layer, heads)
    out = []
    for t, row in enumerate(align):
        top = np.argsort(-row, kind="stable")[:TOP]
        out.append({"step": t, "token": result.tokens.labels[t], "id": int(result.step_ids[t]),
                    "prob": float(result.step_probs[t]),
                    "read": [{"token": source[j], "at": int(j), "weight": float(row[j])} for j in top]})  # fmt: skip
    return out


def emit_generation(result, layer, heads, precision: int, fmt: str, save_npz=None) -> None:
    source = [clean(s) for s in result.context.labels]
    written = [clean(s) for s in result.tokens.labels]
    align = alignment(result, layer, heads)
    at = result.step_attentions.shape[1] - 1 if layer is None else layer
    if fmt == "json":
        from qkv_cli.views.export.results import write_json

        doc = {"model": result.model.name, "source_tokens": source, "ids": [int(i) for i in result.ids],
               "decoder_ids": [int(i) for i in result.step_ids], "tokens": written, "text": clean(result.text),
               "probs": result.step_probs, "layer": at, "heads": list(heads), "alignment": align,
               "cross_attentions": result.step_attentions}  # fmt: skip
        write_json(doc, sys.stdout)
        sys.stdout.write("\n")
    elif fmt == "csv":
        import csv

        writer = csv.writer(sys.stdout, lineterminator="\n")
        writer.writerow(["step", "token", "prob", *source])
        for t, row in enumerate(align):
            writer.writerow([t, written[t], f"{result.step_probs[t]:.{precision}f}",
                             *(f"{v:.{precision}f}" for v in row)])  # fmt: skip
    else:
        table(result, source, written, align, at, heads, precision)
    if save_npz is not None:
        from qkv_cli.views.export.writing import save_npz as save

        arrays = {"ids": np.asarray(result.ids), "decoder_ids": np.asarray(result.step_ids),
                  "probs": result.step_probs, "cross_attentions": result.step_attentions,
                  "source_tokens": np.array(source, dtype=str), "tokens": np.array(written, dtype=str)}  # fmt: skip
        print(f"saved {save(arrays, save_npz)} (each step's cross-attention, every decoder layer)", file=sys.stderr)


def table(result, source, written, align, at: int, heads, precision: int) -> None:
    from rich.table import Table

    from qkv_cli.views.console import console

    out = console()
    L = result.step_attentions.shape[1]
    which = "all heads" if len(heads) == result.step_attentions.shape[2] else f"heads {', '.join(map(str, heads))}"
    out.print(f"{clean(result.model.name)} ({result.model.family}): greedy, {len(written)} tokens written; source "
              f"n={len(source)}; cross-attention of decoder layer {at} of 0..{L - 1}, mean over {which}; encoder "
              "keys and values computed once, the decoder's kept in a KV cache", style="bold")  # fmt: skip
    t = Table(show_edge=False)
    for name in ("step", "wrote", "p", f"read most (alpha over the {len(source)} source tokens)"):
        t.add_column(name, justify="right" if name in ("step", "p") else "left")
    for s, row in enumerate(align):
        top = np.argsort(-row, kind="stable")[:TOP]
        read = "  ".join(f"{source[j]} {row[j]:.{precision}f}" for j in top)
        t.add_row(str(s), written[s], f"{result.step_probs[s]:.{precision}f}", read)
    out.print(t)
    out.print(f"text: {clean(result.text)}")
