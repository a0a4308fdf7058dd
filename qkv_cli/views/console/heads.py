"""`qkv heads`: per layer and head statistics and roles (see core.roles for the definitions and thresholds)."""

from __future__ import annotations

import csv
import io
import json
import sys
from collections import Counter

import numpy as np

from qkv_cli.core.result import Kind
from qkv_cli.core.roles import LOCAL_RADIUS, ROLES, THRESHOLDS, layer_head_stats
from qkv_cli.errors import QkvError
from qkv_cli.views.console import clean


def emit_roles(results: list, fmt: str, detect: dict | None = None) -> None:
    """`qkv heads`: per layer and head statistics aggregated over the sentences (one Result each).

    detect: the detectors' options (measure, exclude_first, exclude_current), "show" (their columns in the table
    of a random-weights run) and "probe" (the --induction-probe length, for the header)."""
    detect = dict(detect or {})
    options = detector_settings(detect)
    stats, header = role_stats(results, options, detect.get("layers") or ())
    pick = {k: detect.get(k) for k in ("sort", "ascending", "top")}
    if results[0].kind == Kind.MODEL:
        note = ""
        if detect.get("probe"):
            note = f"induction probe: {detect['probe']} random tokens (seed {detect.get('seed', 0)}), repeated twice"
        return emit_heads(stats, fmt, header, len(results), checkpoint=True, options=options, note=note,
                          pick=pick, probed=bool(detect.get("probe")))  # fmt: skip
    emit_heads(stats, fmt, header, len(results), detectors=bool(detect.get("show")), options=options, pick=pick)


def picked(flat: list[dict], sort: str | None = None, ascending: bool = False, top: int | None = None) -> list[dict]:
    """--sort COLUMN (largest first; ascending: smallest first; ties in model order), then --top N."""
    if sort:
        flat = sorted(flat, key=lambda s: s[sort], reverse=not ascending)
    return flat[:top] if top else flat


def picked_title(pick: dict, total: int) -> str:
    if not pick.get("top"):
        return (
            f"sorted by {pick['sort']}" + (", smallest first" if pick.get("ascending") else "")
            if pick.get("sort")
            else ""
        )
    if not pick.get("sort"):
        return f"the first {min(pick['top'], total)} of {total} heads"
    most = "smallest" if pick.get("ascending") else "largest"
    return f"the {min(pick['top'], total)} heads with the {most} {pick['sort']} of {total}"


def detector_settings(detect: dict) -> dict:
    """The detectors' options (measure, exclude_first, exclude_current) with their defaults."""
    return {k: detect.get(k, v) for k, v in (("measure", "mul"), ("exclude_first", False),
                                             ("exclude_current", False))}  # fmt: skip


def role_stats(results: list, options: dict, layers=()) -> tuple[list, str]:
    """(roles.layer_head_stats grid (L x tau), the header line) of one Result per sentence: a checkpoint's MODEL
    results (only `layers`, when given) or random-weights layers."""
    if results[0].kind == Kind.MODEL:
        run = results[0]
        if any(r.is_cross for r in results):  # an encoder-decoder's cross-attention: keys from the source
            raise QkvError("head roles need self-attention (self, previous and first token are positions of one "
                           "text): run the encoder-decoder with attention encoder or decoder")  # fmt: skip
        info = run.model
        header = (f"{clean(info.name)} ({info.family}) L={info.n_layers} tau={run.attentions.shape[1]} "
                  f"d={run.last_hidden_state.shape[1]} kernel={run.kernel}")  # fmt: skip
        stats = layer_head_stats([r.attentions for r in results], tokens_list=[query_ids(r) for r in results],
                                 labels_list=[r.labels for r in results], **options)  # fmt: skip
        if run.sinks is not None:  # gpt-oss: the mean share of a row its learned sink took, over every sentence
            for l, row in enumerate(stats):
                for j, s in enumerate(row):
                    s["sink_share"] = float(np.mean([r.sinks[l, j].mean() for r in results]))
        chosen = chosen_layers(layers, len(stats))
        if chosen:  # --layer: only those layers' rows (numbered as in the model)
            stats = [stats[layer] for layer in chosen]
            header += " layers " + ",".join(map(str, chosen))
        return stats, header
    if any(r.is_cross for r in results):
        raise QkvError(
            "qkv heads needs self-attention (self, previous and first token are positions of one text): drop --context"
        )
    from qkv_cli.views.console.describe import settings_line

    tokens = [r.tokens.strings if r.tokens.ids is None else r.tokens.ids for r in results]
    stats = layer_head_stats([r.weights[None] for r in results], [~r.masked for r in results], tokens_list=tokens,
                             labels_list=[r.labels for r in results], **options)  # fmt: skip
    return stats, settings_line(results[0]).split(" ", 1)[1]  # without m: lines differ in length


def query_ids(run):  # (m,): an encoder-decoder's decoder attention reads the target's ids, not the source's (ids)
    return run.ids if run.encdec is None else run.tokens.ids


def chosen_layers(layers, count: int) -> list[int]:
    """--layer values (negative from the end) as layer numbers 0..count-1, in the order given, each once."""
    out = []
    for layer in layers:
        if not -count <= layer < count:
            raise QkvError(f"--layer {layer} does not exist: the model has layers 0..{count - 1}")
        if layer % count not in out:
            out.append(layer % count)
    return out


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
SINK_COLUMN = [("sink_share", "sink share")]  # the learned sink's mean share of a row (1 - row sum; gpt-oss)
DETECTOR_COLUMNS = [("next", "next"), ("sink", "sink"), ("previous_token", "tl prev"), ("duplicate_token", "dup"),
                    ("induction", "ind")]  # fmt: skip
NEW_ROLES = ("induction", "duplicate-token", "next-token", "sink")


def emit_heads(stats_grid, fmt: str, header: str, sentences: int, checkpoint: bool = False, detectors: bool = False,
               options: dict | None = None, note: str = "", pick: dict | None = None,
               probed: bool = False) -> None:  # fmt: skip
    """stats_grid: roles.layer_head_stats output (L x tau). L == 1 prints one row per head; L > 1 adds a
    layer x head grid of role labels. A checkpoint (or detectors=True, or a head with one of NEW_ROLES) adds the
    next, sink and detector columns; a checkpoint also a line per layer counting its roles."""
    options = options or {"measure": "mul", "exclude_first": False, "exclude_current": False}
    pick = pick or {}
    every = [s for row in stats_grid for s in row]
    sinks = bool(every) and "sink_share" in every[0]  # a model with attention sinks
    columns = COLUMNS + (SINK_COLUMN if sinks else [])
    flat = picked(every, pick.get("sort"), bool(pick.get("ascending")), pick.get("top"))
    chosen = picked_title(pick, len(every))
    if fmt == "json":
        doc = {
            "settings": header,
            "sentences": sentences,
            "thresholds": THRESHOLDS,
            "local_radius": LOCAL_RADIUS,
            "detectors": options,
            **({"note": note} if note else {}),
            **({"chosen": chosen} if chosen else {}),
            "layers": len(stats_grid),
            "heads": flat,
        }
        sys.stdout.write(json.dumps(doc) + "\n")
        return
    if fmt == "csv":
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        names = ["layer", "head"] + [k for k, _ in columns + DETECTOR_COLUMNS] + ["sink_token", "role", "rows"]
        writer.writerow(names)
        for s in flat:
            writer.writerow([s[k] if isinstance(s[k], (int, str)) else repr(float(s[k])) for k in names])
        sys.stdout.write(buf.getvalue())
        return
    from rich import box
    from rich.table import Table

    from qkv_cli.views.console import console

    out = console()
    out.print(header, style="bold")
    if note:
        out.print(note)
    rows = sum(s["rows"] for s in stats_grid[0][:1])
    out.print(f"{sentences} sentence{'s' if sentences != 1 else ''}, {rows} query rows per head")
    layers = len(stats_grid)
    extended = checkpoint or detectors or any(s["role"] in NEW_ROLES for s in every)
    legend = "prev = previous-token, self, first = first-token, local, broad, mixed"
    legend += ", next = next-token, sink, ind = induction, dup = duplicate-token" if extended else ""
    if layers > 1 and not pick.get("top"):  # the overview of every head; --top shows only some
        grid = Table(title="Roles: layer x head", box=box.SIMPLE_HEAD, title_justify="left", padding=(0, 1))
        grid.add_column("layer", justify="right")
        for j in range(len(stats_grid[0])):
            grid.add_column(str(j), justify="left", no_wrap=True)
        for row in stats_grid:
            grid.add_row(str(row[0]["layer"]), *(ROLE_SHORT[s["role"]] for s in row))
        out.print(narrow(grid, out))
        out.print(legend, style="dim")
    if checkpoint and not pick.get("top"):
        for row in stats_grid:
            out.print(f"layer {row[0]['layer']}: {role_counts(row)}")
        out.print()
    by_layer = layers > 1 or checkpoint
    if chosen:
        out.print(f"Heads: {chosen}", style="bold")
    out.print(fitted(flat, columns, by_layer, out))
    if extended:
        out.print(fitted(flat, DETECTOR_COLUMNS, by_layer, out, "Next token, sink and detectors"))
        if checkpoint and not probed and all(s["induction"] == 0 and s["duplicate_token"] == 0 for s in every):
            out.print("dup and ind are 0: no token of the text repeats, so no head can copy from an earlier copy; "
                      "--induction-probe N fills them (N random tokens, repeated twice)")  # fmt: skip
    if layers > 1 and pick.get("top"):  # the grid's legend, for the short names of a narrow table
        out.print(legend, style="dim")
    out.print(THRESHOLDS_TEXT.format(**THRESHOLDS, r=LOCAL_RADIUS), style="dim")
    if sinks:
        out.print("sink share: the mean share of a row the head's learned sink logit took (1 - row sum)", style="dim")
    if extended:
        out.print(DETECTORS_TEXT.format(**THRESHOLDS, how=detector_options(options)), style="dim")


def fitted(flat, columns, by_layer: bool, out, title=None):
    """head_table at the terminal's width: tighter gaps, then the short role names of the legend if still too wide."""
    table = narrow(head_table(flat, columns, by_layer, title), out)
    if out.measure(table, options=out.options.update_width(1 << 16)).maximum <= out.width:
        return table
    return narrow(head_table(flat, columns, by_layer, title, short=True), out)


def head_table(flat, columns, by_layer: bool, title=None, short: bool = False):
    """One row per (layer, head): the columns' numbers and the role (a sink names its token); short: the role as
    the legend abbreviates it (prev, first, ...)."""
    from rich import box
    from rich.table import Table

    table = Table(title=title, box=box.SIMPLE_HEAD, padding=(0, 1), pad_edge=False, title_justify="left")
    if by_layer:
        table.add_column("layer", justify="right", no_wrap=True)
    table.add_column("head", justify="right", no_wrap=True)
    for _, name in columns:
        table.add_column(name, justify="right", no_wrap=True)
    table.add_column("role", justify="left", no_wrap=True)
    for s in flat:
        cells = ([str(s["layer"])] if by_layer else []) + [str(s["head"])]
        cells += [f"{s[k]:.2f}" if k in ("entropy", "mean_distance") else f"{s[k]:.3f}" for k, _ in columns]
        role = ROLE_SHORT[s["role"]] if short else s["role"]
        table.add_row(*cells, role + (f" ({clean(s['sink_token'])})" if s["role"] == "sink" else ""))
    return table


def role_counts(row) -> str:
    """'5 first-token, 4 mixed, 3 previous-token': how many heads of one layer have each role."""
    counts = Counter(s["role"] for s in row)
    return ", ".join(f"{counts[r]} {r}" for r in ROLES if counts[r])


def detector_options(options: dict) -> str:
    parts = [f'"{options["measure"]}" measure']
    parts += [f"{name} excluded" for key, name in (("exclude_first", "first token"),
                                                   ("exclude_current", "current token")) if options[key]]  # fmt: skip
    return ", ".join(parts)


def narrow(table, out):
    """At a narrow terminal (80 columns), tighter gaps rather than numbers cut to '0.…'."""
    if out.measure(table, options=out.options.update_width(1 << 16)).maximum > out.width:
        table.padding, table.show_edge = (0, 0), False
        table.columns[-1].no_wrap = False  # the role may be cut ("previous-tok…"), not the numbers
    return table


ROLE_SHORT = {
    "previous-token": "prev",
    "self": "self",
    "first-token": "first",
    "local": "local",
    "broad": "broad",
    "mixed": "mixed",
    "next-token": "next",
    "sink": "sink",
    "induction": "ind",
    "duplicate-token": "dup",
}
THRESHOLDS_TEXT = (
    "role: previous-token if prev >= {previous}, self if self >= {self}, first-token if first >= {first} "
    "(largest wins); else local if local (within {r} positions) >= {local}; else broad if norm H >= {broad}; "
    "else mixed. grad = sum alpha (1 - alpha): softmax gradient size, near 0 = saturated."
)
DETECTORS_TEXT = (
    'Before these: induction if ind >= {induction}, else duplicate-token if dup >= {duplicate_token} (on the "mul" '
    "scores); next-token if next (weight on the token after the query) >= {next} and sink if sink (on one fixed "
    "later token, named in the role) >= {sink} join the largest-share rule. tl prev, dup, ind: TransformerLens' "
    "previous-token, duplicate-token and induction scores ({how}; mean over sentences)."
)
