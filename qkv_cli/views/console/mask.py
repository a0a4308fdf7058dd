"""`qkv mask`: the combined Mask as a grid, each removed cell labelled by the rule that removed it."""

from __future__ import annotations

import json
import sys

import numpy as np

from qkv_cli.core.masks import RULES, removed_by

ALLOWED = "✓"


def mask_doc(g) -> dict:
    """A pipeline.maskgrid.MaskGrid as JSON: the grid, the additive mask (null = -inf), and per cell its rules."""
    m, n = g.allowed.shape
    doc = {} if g.model is None else {"model": g.model}
    if g.layer is not None:
        doc |= {"layer": g.layer, "layer_type": g.layer_type}
    return doc | {
        "tokens": list(g.labels),
        "key_tokens": list(g.key_labels),
        "m": m,
        "n": n,
        "rules": {rule: RULES[rule].help for rule in g.grids},
        "window": g.window,
        "chunk": g.chunk,
        "allowed": g.allowed.tolist(),
        "removed_by": removed_by(g.grids, m, n),
        "mask": [[0.0 if a else None for a in row] for row in g.allowed.tolist()],
        "counts": {rule: int(x.sum()) for rule, x in g.grids.items()} | {"allowed": int(g.allowed.sum())},
    }


def emit(grids: list, fmt: str) -> None:
    """One grid (the options' mask), or one per layer kind of a checkpoint (qkv mask --model)."""
    if fmt == "json":
        docs = [mask_doc(g) for g in grids]
        doc = docs[0] if len(docs) == 1 else docs[0] | {"layers": docs}
        sys.stdout.write(json.dumps(doc) + "\n")
        return
    for k, g in enumerate(grids):
        if k:
            sys.stdout.write("\n")
        emit_grid(g)


def emit_grid(g) -> None:
    """model: a checkpoint whose own tokens and mask these are (qkv mask --model)."""
    from rich.text import Text

    from qkv_cli.views.console import clean, console
    from qkv_cli.views.console.tables import grid_table

    out = console()
    labels, key_labels, grids, allowed, window = g.labels, g.key_labels, g.grids, g.allowed, g.window
    m, n = allowed.shape
    cw = max(1, min(5, max(len(k) for k in key_labels)))
    code = np.full((m, n), ALLOWED, dtype=object)
    for rule in reversed(RULES):  # the first rule in RULES wins the label
        if rule in grids:
            code[grids[rule]] = RULES[rule].letter
    active = ", ".join(rule for rule in RULES if rule in grids) or "none"
    if g.model is not None:
        kind = "causal: query i sees keys 0..i" if grids else "bidirectional, nothing removed"
        if g.layer_type == "cross_attention":  # an encoder-decoder: rows are the target, columns the source
            kind = "target tokens (rows) over source tokens (columns), nothing removed"
        if window:
            kind += f", within the n_c={window} most recent"
        if g.chunk:
            kind += f", within its own chunk of n_ch={g.chunk}"
        layer = f" layer {g.layer}" + (f" ({g.layer_type})" if g.layer_type else "") if g.layer_type else ""
        out.print(f"{clean(g.model['name'])} ({g.model['family']}){layer}, its own tokens: {kind}")
    out.print(f"Mask for m={m} queries x n={n} keys; rules: {active}", style="bold")

    def cell(i, t):
        return Text(code[i, t], style="dim" if code[i, t] == ALLOWED else "bold")

    table, n_rows, n_cols = grid_table(labels, key_labels, cell, cw, out.width, justify="center")
    out.print(table)
    if n_rows < m or n_cols < n:
        out.print(f"showing {n_rows} of {m} rows and {n_cols} of {n} columns; --format json shows all", style="italic")
    out.print(f"{ALLOWED} = may attend (Mask 0); a letter = removed (Mask -inf) by:")
    for rule in RULES:
        if rule in grids:
            extra = f" (n_c={window})" if rule == "window" and window else ""
            extra = f" (n_ch={g.chunk})" if rule == "chunk" else extra
            out.print(f"  {RULES[rule].letter} = {rule}{extra}: {RULES[rule].help}; {int(grids[rule].sum())} cells")
    if len(grids) > 1 and (sum(g.astype(int) for g in grids.values()) > 1).any():  # no rules: sum() is 0
        out.print(f"  a cell removed by several rules shows the first of {', '.join(RULES)}")
    empty = (~allowed).all(axis=1).nonzero()[0]
    out.print(f"{int(allowed.sum())} of {m * n} cells may attend")
    if empty.size:
        out.print(
            f"queries with every key removed (their weights are all 0): {', '.join(map(str, empty[:10]))}",
            style="yellow",
        )
