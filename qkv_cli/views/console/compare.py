"""What `qkv compare` shows: the header (what A and B are, how their tokens were aligned), A's and B's weights side
by side for one layer and head, their difference B - A, and the heads that moved most; JSON and NPZ with every
layer and head."""

from __future__ import annotations

import sys

import numpy as np

from qkv_cli.pipeline.compare import Comparison
from qkv_cli.views.console import clean

TOP = 10  # heads in the table of those that moved most, unless --top says otherwise


def diff_labels(cmp: Comparison) -> list[str]:
    """The aligned positions' labels: A's token, or `A/B` where the two differ."""
    la, lb = cmp.a.labels, cmp.b.labels
    return [la[i] if la[i] == lb[k] else f"{la[i]}/{lb[k]}" for i, k in zip(cmp.alignment.a, cmp.alignment.b,
                                                                               strict=True)]  # fmt: skip


def header(cmp: Comparison) -> list[str]:
    """The lines above the tables: what A and B are, the model, the alignment."""
    from qkv_cli.views.console.describe import settings_line

    al = cmp.alignment
    lines = []
    if cmp.mode == "texts":
        lines.append(settings_line(cmp.a.first_layer()).replace(f"m={al.m_a} ", ""))
        lines += [f"A: {clean(cmp.names[0])!r} ({al.m_a} tokens)", f"B: {clean(cmp.names[1])!r} ({al.m_b} tokens)"]
    else:
        lines += [f"A: {settings_line(cmp.a.first_layer())}", f"B: {settings_line(cmp.b.first_layer())}"]
    lines.append(clean(al.describe(cmp.a.labels, cmp.b.labels)))
    return lines


def emit(cmp: Comparison, head: int | None, precision: int, fmt: str, top: int | None,
         save_npz: str | None = None) -> None:  # fmt: skip
    """The tables (or JSON on stdout); then the NPZ if asked."""
    if fmt == "json":
        from qkv_cli.views.export.results import write_json

        write_json(json_doc(cmp), sys.stdout)
        sys.stdout.write("\n")
    else:
        tables(cmp, head, precision, top)
    if save_npz is not None:
        from qkv_cli.views.export.writing import save_npz as save

        print(f"saved {save(arrays(cmp), save_npz)}", file=sys.stderr)


def tables(cmp: Comparison, head: int | None, precision: int, top: int | None) -> None:
    from rich.table import Table
    from rich.text import Text

    from qkv_cli.views.console import console
    from qkv_cli.views.console.tables import legend, matrix_table

    out = console()
    for i, line in enumerate(header(cmp)):
        out.print(Text(line), style="bold" if i == 0 else None)
    l, j = cmp.layer, cmp.head(head)
    li = cmp.layers.index(l)
    at = f"layer {l}, head {j}" if cmp.checkpoint else f"head {j}"
    why = "" if head is not None else " (the head that moved most here; --head picks another)"
    out.print(Text(f"alpha of {at}{why}: TV {cmp.tv[li, j]:.3f}"))
    half = max(20, (out.width - 3) // 2)
    sides = []
    for name, run, w, side in (("A", cmp.a, cmp.weights_a, "a"), ("B", cmp.b, cmp.weights_b, "b")):
        table, note = matrix_table(name, w[li, j], run.labels, run.labels, precision, half,
                                   weights=True, masked=cmp.masked(side, l))  # fmt: skip
        sides.append(table if note is None else _with_note(table, note))
    grid = Table.grid(padding=(0, 3))
    grid.add_row(*sides)
    out.print(grid)
    al = cmp.alignment
    both = cmp.masked("a", l)[np.ix_(al.a, al.a)] & cmp.masked("b", l)[np.ix_(al.b, al.b)]
    labels = diff_labels(cmp)
    table, note = matrix_table("B - A (aligned positions)", cmp.diff[li, j], labels, labels, precision,
                               out.width, masked=both)  # fmt: skip
    out.print(table if note is None else _with_note(table, note))
    if both.any():
        out.print(legend(precision).append("; B - A of a key masked in both is 0 (dim)"))
    out.print(moved_table(cmp, TOP if top is None else top))
    off = "" if al.by_position else "; weight on tokens left out of the alignment counts as moved"
    out.print(Text("TV: the total-variation distance of each aligned query's weights in A and B, mean over the "
                   f"queries (0: the same, 1: nothing in common){off}", style="dim"))  # fmt: skip


def _with_note(table, note):
    from rich.console import Group
    from rich.text import Text

    shown = note.split(";")[0]  # "showing 48 of 300 rows ..."
    return Group(table, Text(f"{shown}; --format json, --save-npz or --out show all", style="italic"))


def moved_table(cmp: Comparison, top: int):
    from rich import box
    from rich.table import Table

    rows = cmp.moved(top)
    count = len(cmp.layers) * cmp.tau
    title = f"Heads that moved most ({len(rows)} of {count})"
    table = Table(title=title, box=box.SIMPLE_HEAD, title_justify="left")
    names = (["layer"] if cmp.checkpoint else []) + ["head", "TV", "largest B - A", "at (query -> key)"]
    for name in names:
        table.add_column(name, justify="left" if name.startswith("at") else "right")
    labels = diff_labels(cmp)
    for r in rows:
        where = f"{clean(labels[r['query']])} -> {clean(labels[r['key']])}"
        cells = [str(r["head"]), f"{r['tv']:.3f}", f"{r['max_change']:+.3f}", where]
        table.add_row(*([str(r["layer"])] if cmp.checkpoint else []), *cells)
    return table


def side_doc(run, name) -> dict:
    ids = run.token_ids
    return {"name": name, "tokens": list(run.tokens.strings), "labels": run.labels,
            "ids": None if ids is None else [int(i) for i in ids]}  # fmt: skip


def json_doc(cmp: Comparison) -> dict:
    """Every layer and head: A's and B's weights, B - A at the aligned positions, the per-head summary."""
    al = cmp.alignment
    return {
        "mode": cmp.mode, "a": side_doc(cmp.a, cmp.names[0]), "b": side_doc(cmp.b, cmp.names[1]),
        "alignment": {"a": [int(i) for i in al.a], "b": [int(i) for i in al.b], "by_position": al.by_position,
                      "prefix": al.prefix, "suffix": al.suffix, "differing": list(al.differing),
                      "description": al.describe(cmp.a.labels, cmp.b.labels)},
        "layers": list(cmp.layers), "tau": cmp.tau, "heads_moved": cmp.moved(),
        "tv": cmp.tv, "max_change": cmp.max_change, "weights_a": cmp.weights_a, "weights_b": cmp.weights_b,
        "diff": cmp.diff,
    }  # fmt: skip


def arrays(cmp: Comparison) -> dict:
    """The NPZ: the same names as the JSON, each side's tokens and ids as tokens_a, labels_a, ids_a ..."""
    al = cmp.alignment
    out = {"mode": np.array(cmp.mode), "name_a": np.array(cmp.names[0]), "name_b": np.array(cmp.names[1])}
    for side, run in (("a", cmp.a), ("b", cmp.b)):
        doc = side_doc(run, "")
        out[f"tokens_{side}"] = np.array(doc["tokens"], dtype=str)
        out[f"labels_{side}"] = np.array(doc["labels"], dtype=str)
        if doc["ids"] is not None:
            out[f"ids_{side}"] = np.array(doc["ids"], dtype=np.int64)
    out.update(aligned_a=al.a, aligned_b=al.b, layers=np.array(cmp.layers, dtype=np.int64), tv=cmp.tv,
               max_change=cmp.max_change, at=cmp.at, weights_a=cmp.weights_a, weights_b=cmp.weights_b,
               diff=cmp.diff)  # fmt: skip
    return out
