"""Views for the learning commands: the mask grid (`qkv mask`), head roles (`qkv heads`), batches (`--batch`),
the grouped-query mapping of `qkv shapes`, and the settings-line suffix for context, --kv-heads, masks, ablation."""

from __future__ import annotations

import csv
import io
import json
import sys

import numpy as np

CODES = {"causal": "C", "window": "W", "padding": "P", "custom": "X"}
ALLOWED = "✓"


def settings_suffix(result) -> str:
    s = result.settings
    parts = []
    G = getattr(s, "G", s.tau)
    if G != s.tau:
        parts.append(f"kv_heads G={G}")
    if "H_context" in result.extra.get("arrays", {}):
        parts.append(f"cross-attention n={len(result.key_labels)} (keys/values from --context)")
    if "custom_allowed" in result.extra:
        parts.append("mask-file")
    if getattr(s, "ablate", None):
        parts.append(f"ablate={s.ablate.upper()} ({s.ablate_with})")
    return "".join(f" {p}" for p in parts)


# ---- qkv mask ----------------------------------------------------------------------------------------------


def mask_doc(labels, key_labels, grids, allowed, window=None, model=None) -> dict:
    from qkv_cli.maskgrid import RULE_HELP, removed_by

    m, n = allowed.shape
    doc = {} if model is None else {"model": model}
    return doc | {
        "tokens": list(labels),
        "key_tokens": list(key_labels),
        "m": m,
        "n": n,
        "rules": {rule: RULE_HELP[rule] for rule in grids},
        "window": window,
        "allowed": allowed.tolist(),
        "removed_by": removed_by(grids, m, n),
        "mask": [[0.0 if a else None for a in row] for row in allowed.tolist()],
        "counts": {rule: int(g.sum()) for rule, g in grids.items()} | {"allowed": int(allowed.sum())},
    }


def emit_mask(labels, key_labels, grids, allowed, fmt: str, window=None, model=None) -> None:
    """model: {"name", "family"} of a checkpoint whose own tokens and mask these are (qkv mask --model)."""
    if fmt == "json":
        sys.stdout.write(json.dumps(mask_doc(labels, key_labels, grids, allowed, window, model)) + "\n")
        return
    from rich.text import Text

    from qkv_cli.maskgrid import RULE_HELP, RULES
    from qkv_cli.render import grid_table
    from qkv_cli.views import console

    out = console()
    m, n = allowed.shape
    cw = max(1, min(5, max(len(k) for k in key_labels)))
    code = np.full((m, n), ALLOWED, dtype=object)
    for rule in reversed(RULES):  # the first rule in RULES wins the label
        if rule in grids:
            code[grids[rule]] = CODES[rule]
    active = ", ".join(rule for rule in RULES if rule in grids) or "none"
    if model is not None:
        kind = "causal: query i sees keys 0..i" if grids else "bidirectional, nothing removed"
        out.print(f"{model['name']} ({model['family']}), its own tokens: {kind}")
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
            out.print(f"  {CODES[rule]} = {rule}{extra}: {RULE_HELP[rule]}; {int(grids[rule].sum())} cells")
    if len(grids) > 1 and (sum(g.astype(int) for g in grids.values()) > 1).any():  # no rules: sum() is 0
        out.print("  a cell removed by several rules shows the first of causal, window, padding, custom")
    empty = (~allowed).all(axis=1).nonzero()[0]
    out.print(f"{int(allowed.sum())} of {m * n} cells may attend")
    if empty.size:
        out.print(
            f"queries with every key removed (their weights are all 0): {', '.join(map(str, empty[:10]))}",
            style="yellow",
        )


# ---- qkv heads ---------------------------------------------------------------------------------------------

COLUMNS = [
    ("entropy", "entropy"),
    ("norm_entropy", "norm H"),
    ("max_weight", "max w"),
    ("mean_distance", "dist"),
    ("self", "self"),
    ("previous", "prev"),
    ("first", "first"),
    ("local", "local"),
    ("softmax_grad", "grad"),
]


def emit_heads(stats_grid, fmt: str, header: str, sentences: int) -> None:
    """stats_grid: roles.layer_head_stats output (L x tau). L == 1 prints one row per head; L > 1 adds a
    layer x head grid of role labels."""
    from qkv_cli.roles import LOCAL_RADIUS, THRESHOLDS

    flat = [s for row in stats_grid for s in row]
    if fmt == "json":
        doc = {
            "settings": header,
            "sentences": sentences,
            "thresholds": THRESHOLDS,
            "local_radius": LOCAL_RADIUS,
            "layers": len(stats_grid),
            "heads": flat,
        }
        sys.stdout.write(json.dumps(doc) + "\n")
        return
    if fmt == "csv":
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        names = ["layer", "head"] + [k for k, _ in COLUMNS] + ["role", "rows"]
        writer.writerow(names)
        for s in flat:
            writer.writerow([s[k] if isinstance(s[k], (int, str)) else repr(float(s[k])) for k in names])
        sys.stdout.write(buf.getvalue())
        return
    from rich import box
    from rich.table import Table

    from qkv_cli.views import console

    out = console()
    out.print(header, style="bold")
    rows = sum(s["rows"] for s in stats_grid[0][:1])
    out.print(f"{sentences} sentence{'s' if sentences != 1 else ''}, {rows} query rows per head")
    layers = len(stats_grid)
    if layers > 1:
        grid = Table(title="Roles: layer x head", box=box.SIMPLE_HEAD, title_justify="left", padding=(0, 1))
        grid.add_column("layer", justify="right")
        for j in range(len(stats_grid[0])):
            grid.add_column(str(j), justify="left", no_wrap=True)
        for layer, row in enumerate(stats_grid):
            grid.add_row(str(layer), *(ROLE_SHORT[s["role"]] for s in row))
        out.print(narrow(grid, out))
        out.print("prev = previous-token, self, first = first-token sink, local, broad, mixed", style="dim")
    table = Table(box=box.SIMPLE_HEAD, padding=(0, 1), pad_edge=False)
    if layers > 1:
        table.add_column("layer", justify="right", no_wrap=True)
    table.add_column("head", justify="right", no_wrap=True)
    for _, title in COLUMNS:
        table.add_column(title, justify="right", no_wrap=True)
    table.add_column("role", justify="left", no_wrap=True)
    for s in flat:
        cells = ([str(s["layer"])] if layers > 1 else []) + [str(s["head"])]
        cells += [f"{s[k]:.2f}" if k in ("entropy", "mean_distance") else f"{s[k]:.3f}" for k, _ in COLUMNS]
        table.add_row(*cells, s["role"])
    out.print(narrow(table, out))
    out.print(THRESHOLDS_TEXT.format(**THRESHOLDS, r=LOCAL_RADIUS), style="dim")


def narrow(table, out):
    """At a narrow terminal (80 columns), tighter gaps rather than numbers cut to '0.…'."""
    if out.measure(table, options=out.options.update_width(1 << 16)).maximum > out.width:
        table.padding, table.show_edge = (0, 0), False
        table.columns[-1].no_wrap = False  # the role may be cut ("previous-tok…"), not the numbers
    return table


ROLE_SHORT = {
    "previous-token": "prev",
    "self": "self",
    "first-token sink": "first",
    "local": "local",
    "broad": "broad",
    "mixed": "mixed",
}
THRESHOLDS_TEXT = (
    "role: previous-token if prev >= {previous}, self if self >= {self}, first-token sink if first >= {first} "
    "(largest wins); else local if local (within {r} positions) >= {local}; else broad if norm H >= {broad}; "
    "else mixed. grad = sum alpha (1 - alpha): softmax gradient size, near 0 = saturated."
)


# ---- --batch -----------------------------------------------------------------------------------------------


def emit_batch(batch, show, heads, precision, fmt, save_npz=None) -> None:
    from qkv_cli import export, render
    from qkv_cli.summary import head_summary
    from qkv_cli.views import console, settings_line

    if save_npz is not None:
        from qkv_cli.export import check_output_path

        check_output_path(save_npz)
    if fmt == "json":
        doc = {
            "padded_length": batch.L,
            "lengths": batch.lengths,
            "sentences": [json.loads(export.to_json(r, show, heads)) for r in batch.results],
        }
        sys.stdout.write(json.dumps(doc, allow_nan=False) + "\n")
    elif fmt == "csv":
        out_rows = []
        for b, r in enumerate(batch.results):
            lines = export.to_csv(r, show, heads).splitlines()
            if b == 0:
                out_rows.append("sentence," + lines[0])
            out_rows += [f"{b},{line}" for line in lines[1:]]
        sys.stdout.write("\n".join(out_rows) + "\n")
    else:
        out = console()
        out.print(settings_line(batch.results[0]).split(" ", 1)[1], style="bold")
        out.print(
            f"batch of {len(batch.results)} sentences padded to L={batch.L} tokens: pad keys get -inf in the "
            "Mask; each sentence is shown without its pads"
        )
        for b, r in enumerate(batch.results):
            out.print()
            out.print(f"sentence {b}: m={len(r.labels)} (+{batch.L - len(r.labels)} pads)", style="bold")
            parts, notes = render.result_views(r, show, heads, precision, out.width, where=f"[{b}] ")
            for part in parts:
                out.print(part)
            for note in notes:
                out.print(note, style="italic")
            summary = head_summary(r.weights[heads], live_rows=~r.empty_rows)
            for row, j in zip(summary, heads, strict=True):
                row["head"] = j
            out.print(render.summary_table(summary, title=f"[{b}] per-head summary"))
        if "weights" in show:
            out.print(render.legend())
    if save_npz is not None:
        from qkv_cli.batch import arrays

        p = export.check_output_path(save_npz)
        with export.atomic_write(p) as handle:
            np.savez(handle, **arrays(batch))
        print(f"saved {p}", file=sys.stderr)


# ---- qkv shapes --kv-heads ---------------------------------------------------------------------------------


def gqa_lines(d: int, tau: int, G: int, itemsize: int) -> list[str]:
    """The query head -> key/value head mapping and what sharing saves."""
    dk = d // tau
    r = tau // G
    groups = [f"{g * r}..{g * r + r - 1} -> {g}" if r > 1 else f"{g} -> {g}" for g in range(G)]
    if len(groups) > 8:
        groups = groups[:4] + ["..."] + groups[-2:]
    full = 4 * d * d
    saved = 2 * (tau - G) * d * dk
    cache, cache_full = 2 * G * dk * itemsize, 2 * tau * dk * itemsize
    return [
        f"grouped-query attention: tau={tau} query heads share G={G} key/value heads; query head j uses key/value "
        f"head j // (tau/G) = j // {r}",
        "query heads -> kv head: " + ", ".join(groups),
        f"W_k, W_v: {G} x ({d} x {dk}) each instead of {tau}: {saved:,} fewer parameters "
        f"({full - saved:,} instead of {full:,} for W_q, W_k, W_v, W^o; {100 * saved / full:.1f}% saved)",
        f"K, V cache per token: {cache:,} bytes instead of {cache_full:,} ({tau // G}x smaller)",
    ]


def gqa_doc(d: int, tau: int, G: int) -> dict:
    dk = d // tau
    return {
        "kv_heads": G,
        "kv_head_of_query_head": [j // (tau // G) for j in range(tau)],
        "params_saved": 2 * (tau - G) * d * dk,
    }
