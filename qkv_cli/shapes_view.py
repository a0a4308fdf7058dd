"""`qkv shapes`: the shape table, rendered with rich (no numpy, no tokenizers unless TEXT is given)."""

from __future__ import annotations

import json

from qkv_cli.shapes import ITEMSIZE, as_json, matrices


def count_tokens(text: str, tokenizer: str) -> int:
    from qkv_cli.inputs import get_text
    from qkv_cli.tokens import tokenize

    return len(tokenize(get_text(text, None), tokenizer))


def number(n: float, unit: str = "") -> str:
    """1234567 -> '1.23M' (bytes: '1.23 MB'); 0 -> '-'."""
    if not n:
        return "-"
    for suffix in ("", "K", "M", "G", "T", "P"):
        if abs(n) < 1000 or suffix == "P":
            text = f"{n:.0f}" if suffix == "" else f"{n:.3g}"
            return f"{text}{' ' if unit else ''}{suffix}{unit}"
        n /= 1000
    return str(n)


def emit(text, d, tau, m, n, dtype, tokenizer, fmt, kv_heads=None, context=None) -> None:
    from qkv_cli.errors import QkvError

    if text is not None and m is not None:
        raise QkvError("give either TEXT or --m, not both")
    if context is not None and n is not None:
        raise QkvError("give either --context (n = its tokens) or --n, not both")
    m = count_tokens(text, tokenizer) if text is not None else (30 if m is None else m)
    n = count_tokens(context, tokenizer) if context is not None else n  # cross-attention: n = context tokens
    mats = matrices(d, tau, m, n, kv_heads)
    if fmt == "json":
        doc = as_json(d, tau, m, mats, n, dtype)
        if kv_heads is not None:
            from qkv_cli.learn_views import gqa_doc

            doc.update(gqa_doc(d, tau, kv_heads))
        print(json.dumps(doc))
        return
    if fmt != "table":
        raise QkvError(f"--format {fmt} is not available for shapes: use table or json")
    from rich import box
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    dk = d // tau
    n = m if n is None else n
    title = f"m={m} n={n} d={d} tau={tau} d_k=d/tau={dk} {dtype}; per-head matrices show one head, x = how many"
    table = Table(title=Text(title), box=box.SIMPLE_HEAD, title_justify="left", padding=(0, 1), pad_edge=False)
    console = Console(highlight=False)
    columns = ["matrix", "notation", "shape", "x", "params", "FLOPs", "bytes"]
    wide = console.width >= 110
    rows = []
    for x in mats:
        size = x.rows * x.cols * x.count * ITEMSIZE[dtype]
        rows.append([x.name, x.notation, x.shape, f"x{x.count}", number(x.params), number(x.flops), number(size, "B")])
        rows[-1] += [x.meaning] if wide else []
    total = sum(x.rows * x.cols * x.count * ITEMSIZE[dtype] for x in mats)
    rows.append(
        [
            "total",
            "",
            "",
            "",
            number(sum(x.params for x in mats)),
            number(sum(x.flops for x in mats)),
            number(total, "B"),
        ]
        + ([""] if wide else [])
    )
    names = columns + (["meaning"] if wide else [])
    widths = [max(len(col), *(len(r[k]) for r in rows)) for k, col in enumerate(names)]
    room = console.width - sum(widths) - 3 * len(names) - 2 + widths[1] + (widths[-1] if wide else 0)
    for k, col in enumerate(names):
        squeeze = col in ("notation", "meaning")
        table.add_column(
            col,
            justify="right" if col in columns[3:] else "left",
            no_wrap=True,
            min_width=None if squeeze else widths[k],
            max_width=max(8, room) if squeeze else None,
        )
    for r in rows:
        table.add_row(*(Text(c) for c in r))
    console.print(table)
    if kv_heads is not None:
        from qkv_cli.learn_views import gqa_lines

        for line in gqa_lines(d, tau, kv_heads, ITEMSIZE[dtype]):
            console.print(Text(line))


def emit_model(spec: str, text, m, dtype: str, fmt: str) -> None:
    """`shapes --model`: the checkpoint's real dimensions and parameters per matrix (config.json only, no weights)."""
    from qkv_cli.errors import QkvError
    from qkv_cli.models import parameter_count, parameter_table, read_config, resolve_model
    from qkv_cli.models.load import _display_name

    if text is not None:
        raise QkvError("shapes --model takes --m, not TEXT (the model's tokenizer adds its own special tokens)")
    folder = resolve_model(spec)
    c = read_config(folder, _display_name(folder))  # the name `qkv run --model` shows, not 'model'
    m = 30 if m is None else m
    params = parameter_table(c)
    dims = {"family": c.family, "layers": c.n_layers, "d": c.d, "tau": c.n_heads, "d_k": c.d // c.n_heads,
            "d_ff": c.d_ff, "vocab_size": c.vocab_size, "max_positions": c.max_positions}  # fmt: skip
    attention = matrices(c.d, c.n_heads, m)
    if fmt == "json":
        doc = as_json(c.d, c.n_heads, m, attention, None, dtype) | dims
        doc["parameters"] = {p.name: {"shape": list(p.shape), "count": p.count, "params": p.params} for p in params}
        doc["total_parameters"] = parameter_count(c)
        print(json.dumps(doc))
        return
    from rich import box
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    console = Console(highlight=False)
    console.print(Text(f"{c.name or folder.name}: " + " ".join(f"{k}={v}" for k, v in dims.items())), style="bold")
    table = Table(title=Text("Learned parameters (per-head matrices: one head's shape, x = how many in the model)"),
                  box=box.SIMPLE_HEAD, title_justify="left")  # fmt: skip
    for col in ("matrix", "notation", "shape", "x", "params"):
        table.add_column(col, justify="right" if col in ("x", "params") else "left", no_wrap=True)
    for p in params:
        table.add_row(*(Text(v) for v in (p.name, p.notation, " x ".join(map(str, p.shape)), f"x{p.count}",
                                          f"{p.params:,}")))  # fmt: skip
    table.add_row(Text("total"), Text(""), Text(""), Text(""), Text(f"{parameter_count(c):,}"))
    console.print(table)
    emit(None, c.d, c.n_heads, m, None, dtype, "word", "table")
