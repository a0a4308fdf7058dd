"""`qkv run --model M --predict [--logit-lens]`: the next-token predictions at every position, and after every layer."""

from __future__ import annotations

from rich import box
from rich.table import Table
from rich.text import Text

from qkv_cli.views.console import console
from qkv_cli.views.console.tables import short


def tables(run, precision: int) -> None:
    out = console()
    pr = run.predictions
    table = Table(title="Next-token predictions at each position (the output head on the last layer)",
                  box=box.SIMPLE_HEAD, title_justify="left", padding=(0, 1))  # fmt: skip
    for name in ("i", "token", "top 5 next tokens"):
        table.add_column(name, justify="right" if name == "i" else "left")
    for i, label in enumerate(run.labels):
        top = "  ".join(
            f"{short(t, 10)} {p:.{precision}f}" for t, p in zip(pr["labels"][i], pr["probs"][i], strict=True)
        )
        table.add_row(str(i), Text(short(label, 12)), Text(top))
    out.print(table)
    if "lens_ids" not in pr:
        return
    lens = Table(title="Logit lens: the top next token read out after each layer (final norm, then the head)",
                 box=box.SIMPLE_HEAD, title_justify="left", padding=(0, 1))  # fmt: skip
    lens.add_column("layer", justify="right")
    m = len(run.labels)
    shown = list(range(max(0, m - 8), m))  # the last positions, where the text is going
    for i in shown:
        lens.add_column(Text(f"{i} {short(run.labels[i], 8)}"), justify="left", no_wrap=True)
    for layer, row in enumerate(pr["lens_labels"]):
        lens.add_row(str(layer), *(Text(f"{short(row[i][0], 8)} {pr['lens_probs'][layer, i, 0]:.2f}") for i in shown))
    out.print(lens)
    if len(shown) < m:
        out.print(f"showing the last {len(shown)} of {m} positions; --format json has every one", style="italic")
