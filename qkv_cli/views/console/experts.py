"""`--show experts`: a mixture of experts' routing, per layer and token: the k experts the router chose (best first)
and their gate weights g. A dense model has none to show."""

from __future__ import annotations

from qkv_cli.errors import QkvError


def check(model) -> None:
    """Refuse --show experts where nothing routes: random weights, a dense checkpoint."""
    if model is None:
        raise QkvError("--show experts needs a mixture-of-experts checkpoint (--model): random weights have no experts")
    mlp = getattr(model.config, "mlp", None)
    if getattr(mlp, "moe", None) is None:
        raise QkvError(f"--show experts: {model.name} ({model.config.family}) has a dense MLP, no experts to show")


def rows(run, layer: int, precision: int) -> list[list[str]]:
    """One row per token: position, token, then each chosen expert with its weight, '3 (0.62)'."""
    top, g = run.router_top[layer], run.router_weights[layer]
    from qkv_cli.views.console import clean

    return [[str(i), clean(label), *(f"{int(e)} ({w:.{precision}f})" for e, w in zip(top[i], g[i], strict=True))]
            for i, label in enumerate(run.labels)]  # fmt: skip


def csv_rows(run, layers):
    """CSV rows (export.results.CSV_HEADER, after the layer): matrix "experts", query i, key the expert, the token,
    no key token, and the weight g: one row per token and chosen expert."""
    for l in layers:
        for i, label in enumerate(run.labels):
            for e, w in zip(run.router_top[l, i], run.router_weights[l, i], strict=True):
                if e >= 0:
                    yield [l, "experts", "", i, int(e), label, "", float(w)]


def emit(run, layers, precision: int) -> None:
    """A table per layer in `layers` (a dense layer of a MoE model says so in one line)."""
    from rich import box
    from rich.table import Table

    from qkv_cli.views.console import console

    out, k = console(), run.router_top.shape[-1]
    for l in layers:
        if (run.router_top[l] < 0).all():
            out.print(f"layer {l}: a dense MLP (no experts)")
            continue
        out.print(f"layer {l}: experts per token (weight g)", style="bold")  # a title line: never wrapped to the table
        table = Table(box=box.SIMPLE_HEAD)
        for name in ("i", "token", *(f"expert {j + 1}" for j in range(k))):
            table.add_column(name, justify="left" if name == "token" else "right")
        for row in rows(run, l, precision):
            table.add_row(*row)
        out.print(table)
