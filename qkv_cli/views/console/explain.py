"""`qkv explain` on the terminal (rich) and as JSON: the steps of qkv_cli.explain.trace, and one query zoomed in."""

from __future__ import annotations

import sys

import numpy as np

from qkv_cli.views.console import clean


def vec(x, precision: int, limit: int | None = None) -> str:
    """[0.12 -0.50 1.02]; with `limit`, the first `limit` entries and "…" ([0.12 -0.50 …])."""
    x = np.asarray(x).ravel()
    more = limit is not None and x.size > limit
    shown = " ".join(_num(v, precision) for v in (x[:limit] if more else x))
    return "[" + shown + (" …]" if more else "]")


def _num(v, precision: int) -> str:
    v = float(v)
    if np.isneginf(v):
        return "-inf"
    return f"{v:.{precision}f}"


def emit(result, head: int, query: int | None, precision: int, fmt: str) -> None:
    from qkv_cli.views.console.trace import trace
    from qkv_cli.views.console.zoom import query_zoom

    tr = trace(result, head)
    zoom = None if query is None else query_zoom(tr, query, result)
    if fmt == "json":
        from qkv_cli.views.export.results import write_json

        write_json(as_json(result, tr, zoom), sys.stdout)
        sys.stdout.write("\n")
        return
    from qkv_cli.core.shapes import scale_words, scores_formula
    from qkv_cli.views.console import console
    from qkv_cli.views.console.describe import settings_line

    out = console()
    out.print(settings_line(result), style="bold")
    tau, G = result.Q.shape[0], result.K.shape[0]
    m, n = result.weights.shape[1:]
    where = "Y (the context)" if result.is_cross else "H"
    source = "H"
    if result.is_cross and result.model is not None:  # an encoder-decoder: X is the decoder's stream, Y the encoder's
        source, where = "X (the decoder's stream, target tokens)", "Y (the encoder's output, source tokens)"
    dk, scale, cap = result.d_k, float(result.scale), result.softcap
    words = scale_words(dk, scale, cap, root=result.model is not None)  # the letters the formula leaves: its scale, c
    out.print(
        f"Att(Q, K, V) = Softmax({scores_formula(dk, scale, cap)} + Mask) V{f' ({words})' if words else ''} "
        f"for head j={head} of tau={tau}"
        + (f" (key/value head {tr.kv_head} of G={G})" if G != tau else "")
        + f"; queries from {source}, keys and values from {where}; m={m}, n={n}"
    )
    if zoom is None:
        steps(out, tr, precision)
    else:
        zoom_view(out, zoom, result.key_labels, tr, precision)


def steps(out, tr, precision: int) -> None:
    from qkv_cli.views.console.tables import matrix_table

    for k, step in enumerate(tr.steps, 1):
        note = f"  ({step.note})" if step.note else ""
        out.print()
        out.print(f"Step {k}. {step.formula}   [{step.shape}]{note}", style="bold", overflow="fold")
        masked = np.isneginf(tr["mask"].matrix) if step.grid and step.name != "mask" else None
        digits = 0 if step.name == "mask" else precision
        table, note_text = matrix_table(
            None, step.matrix, step.rows, step.cols, digits, out.width, weights=step.name == "weights", masked=masked
        )
        table.show_edge = False  # no blank line above and below: the walk stays compact
        out.print(table)
        if note_text:  # explain has no csv or npz: its JSON holds every number
            out.print(note_text.split(";")[0] + "; --format json shows all", style="italic")


def zoom_view(out, z: dict, key_labels, tr, precision: int) -> None:
    i, j, g = z["query"], tr.head, tr.kv_head
    p = precision
    dk = len(z["q"])

    def terms_table(cut: int):  # alpha_i,t, v_t and alpha_i,t v_t, the vectors cut to their first `cut` entries
        table = _table(("t", "key", f"alpha_{i},t", "v_t", f"alpha_{i},t v_t"), ("key", "v_t", f"alpha_{i},t v_t"))
        for t in range(len(z["dot"])):
            table.add_row(
                str(t),
                clean(key_labels[t]),
                _num(z["weights"][t], p + 2),
                vec(z["V"][t], p, cut),
                vec(z["terms"][t], p, cut),
            )
        table.add_row("", "sum", "", "", vec(z["output"], p, cut))
        return table

    cut = _widest(terms_table, dk, out)  # d_k = 32 (a checkpoint) does not fit in 100 columns: show a prefix
    out.print()
    out.print(
        f"Query i={i} ({clean(repr(z['token']))}): Att(q_{i}, K, V) = Softmax(q_{i} K^T * scale + Mask_{i}) V",
        style="bold",
    )
    out.print(f"q_{i} = row {i} of Q^[{j}] = {vec(z['q'], p, cut)}", overflow="fold")
    if cut < dk:
        out.print(f"(vectors show their first {cut} of d_k={dk} entries, then …; --format json shows all)")
    if "rope" in z:
        rope_view(out, z["rope"], j, g, p)
    out.print(f"scale = {z['scale']:.4g}")
    capped, split = "capped" in z, "dot_nope" in z  # split: MLA's nope and rope parts of q_i . k_t
    names = ("t", "key", *(("q^C . k^C", "+ q^R . k^R") if split else ()), f"q_{i} . k_t", "* scale",
             *(("tanh(s/c) c",) if capped else ()), f"+ Mask_{i},t", "= s_t", "exp(s_t - max)",
             f"alpha_{i},t")  # fmt: skip
    scores = _table(names, ("key",))
    for t in range(len(z["dot"])):
        cap = (_num(z["capped"][t], p + 2),) if capped else ()
        parts = (_num(z["dot_nope"][t], p + 2), _num(z["dot_rope"][t], p + 2)) if split else ()
        scores.add_row(str(t), clean(key_labels[t]), *parts, _num(z["dot"][t], p + 2), _num(z["scaled"][t], p + 2),
                       *cap, _num(z["mask"][t], 0), _num(z["score"][t], p + 2), _num(z["exp"][t], p + 2),
                       _num(z["weights"][t], p + 2))  # fmt: skip
    out.print(_narrowed(scores, out))
    if "sink" in z:  # gpt-oss: the sink logit joins the max and the sum as one more column, then is dropped
        out.print(
            f"sink s_{j} = {z['sink']:.{p + 2}f}: max over (s_t, s_{j}) = {z['max']:.{p + 2}f};  sum = sum_t "
            f"exp(s_t - max) + exp(s_{j} - max) = {z['sum']:.{p + 2}f};  alpha_{i},t = exp(s_t - max) / sum; the "
            f"sink's share exp(s_{j} - max) / sum = {z['sink_share']:.{p + 2}f} (the weights sum to "
            f"{float(z['weights'].sum()):.{p + 2}f})"
        )
    else:
        out.print(
            f"max s_t = {z['max']:.{p + 2}f};  sum_t exp(s_t - max) = {z['sum']:.{p + 2}f};  "
            f"alpha_{i},t = exp(s_t - max) / sum  (the weights sum to {float(z['weights'].sum()):.{p + 2}f})"
        )
    out.print()
    out.print(f"head_{j} row {i} = sum_t alpha_{i},t v_t  (v_t = row t of V^[{g}])", style="bold")
    out.print(_narrowed(terms_table(cut), out))


def rope_view(out, r: dict, j: int, g: int, p: int) -> None:
    """q_i and k_i before and after RoPE, and the angle i * theta_k of each pair (k, k + rot/2)."""
    i = r["position"]
    out.print(f"RoPE at position {i}: pair (k, k+{len(r['theta'])}) of q_{i} (head {j}) and k_{i} (kv head {g}) "
              f"turns by the angle {i} * theta_k", style="bold")  # fmt: skip
    table = _table(("pair", "theta_k", "angle", "q before", "q after", "k before", "k after"), ("pair",))
    for k, (a, b) in enumerate(r["pairs"]):
        table.add_row(f"{a},{b}", f"{r['theta'][k]:.4g}", f"{r['angle'][k]:.4f}",
                      *(f"{x[a]:.{p}f},{x[b]:.{p}f}" for x in (r["q_before"], r["q_after"], r["k_before"],
                                                               r["k_after"])))  # fmt: skip
    out.print(_narrowed(table, out))
    if r["scaling"] != 1.0:
        out.print(f"cos and sin are scaled by {r['scaling']:.4g} (YaRN)")


def _table(names, left):
    from rich import box
    from rich.table import Table

    table = Table(box=box.SIMPLE_HEAD, padding=(0, 1), pad_edge=False)
    for name in names:
        table.add_column(name, justify="left" if name in left else "right", no_wrap=True)
    return table


def _width(table, out) -> int:
    """The table's natural width (rich clamps a measurement to the console: measure against a wide one)."""
    from rich.measure import Measurement

    return Measurement.get(out, out.options.update(width=100_000), table).maximum


def _narrowed(table, out):
    """One space between columns instead of three when the table would not fit the terminal."""
    if _width(table, out) > out.width:
        table.padding = (0, 0)
    return table


def _widest(build, n: int, out) -> int:
    """The most entries (2..n) of each vector for which build(k), narrowed, fits the terminal (binary search)."""
    lo, hi = 2, n
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if _width(_narrowed(build(mid), out), out) <= out.width:
            lo = mid
        else:
            hi = mid - 1
    return min(lo, n)


def as_json(result, tr, zoom) -> dict:
    from qkv_cli.views.export.results import jsonable, nan_to_null, settings_dict

    doc = {
        "tokens": list(result.tokens.strings),
        "labels": result.labels,
        "settings": settings_dict(result),
        "head": tr.head,
        "kv_head": tr.kv_head,
        "steps": {
            s.name: {
                "formula": s.formula,
                "shape": list(s.matrix.shape),
                "note": s.note,
                "matrix": nan_to_null(jsonable(s.matrix)),
            }
            for s in tr.steps
        },
    }
    if result.is_cross:
        doc["context_tokens"] = result.key_labels
    if zoom is not None:
        doc["query"] = plain(zoom, jsonable, nan_to_null)
    return doc


def plain(obj, jsonable, nan_to_null):
    """Arrays in a (nested) dict as JSON lists."""
    if isinstance(obj, dict):
        return {k: plain(v, jsonable, nan_to_null) for k, v in obj.items()}
    return nan_to_null(jsonable(obj)) if isinstance(obj, np.ndarray) else obj
