"""What `qkv patch` shows: the two runs' metric, the top patches by recovery; JSON and NPZ with every recovery."""

from __future__ import annotations

import sys

from qkv_cli.pipeline.patch.result import Patching
from qkv_cli.views.console import clean

WHAT_SAYS = {"resid": "the residual stream leaving layer l", "attn": "layer l's attention output",
             "mlp": "layer l's MLP output", "heads": "head j's output z", "q": "head j's queries Q",
             "k": "key/value head g's keys K", "v": "key/value head g's values V",
             "pattern": "head j's attention weights"}  # fmt: skip

SIDE_SAYS = {  # an encoder-decoder's --attention: where the layers, positions and heads above are
    "encoder": "in the encoder: its layers, the source positions, its self-attention's heads",
    "decoder": "in the decoder: its layers, the target positions, its causal self-attention's heads",
    "cross": "in the decoder: its layers, the target positions, its cross-attention's heads (q: the decoder's "
    "queries; k, v: the keys and values each head reads from the source, every source position at once)",
}


def header(p: Patching) -> list[str]:
    """What ran: the model, the two prompts, the metric of each run and what 0 and 1 mean."""
    wrong = "" if p.wrong is None else clean(p.wrong[1])
    names = {
        "logit-diff": f"logit({clean(p.answer[1])}) - logit({wrong})",
        "prob": f"p({clean(p.answer[1])})",
        "kl": "KL(clean || run)",
    }
    into = "clean into corrupted" if p.direction == "denoise" else "corrupted into clean"
    if p.side is not None:  # an encoder-decoder: two sources, one teacher-forced target
        a, b = p.sources or (p.labels_clean, p.labels_corrupted)
        diff = ", ".join(f"{i} {clean(a[i])!r} -> {clean(b[i])!r}" for i in p.differing()[:6])
        decoder = " ".join(clean(s) for s in p.decoder)
        return [
            f"{clean(p.model)}: patching {into}, --attention {p.side} ({len(a)} source tokens; they differ at "
            f"{diff or 'no position'})",
            f"target:    {clean(p.target)!r} (decoder: {decoder}; the answer comes next)",
            f"clean:     {clean(p.clean)!r}   {names[p.metric]} = {p.metric_clean:.4f}",
            f"corrupted: {clean(p.corrupted)!r}   {names[p.metric]} = {p.metric_corrupted:.4f}",
            "recovery = (metric patched - corrupted) / (clean - corrupted), at the decoder's last position: 0 = the "
            "corrupted run, 1 = the clean run",
        ]
    if p.pairs is None:
        diff = ", ".join(f"{i} {clean(p.labels_clean[i])!r} -> {clean(p.labels_corrupted[i])!r}"
                         for i in p.differing()[:6])  # fmt: skip
        shape = f"{p.m} tokens; they differ at {diff or 'no position'}"
    else:
        shape = pairing(p)
    a_c, a_x = p.answer_position
    if a_c == p.m - 1 and a_x == len(p.labels_corrupted) - 1:
        at = "the last position"
    else:
        also = "" if a_c == a_x else f", {a_x} in the corrupted run"
        at = f"the answer position ({a_c} {clean(p.labels_clean[a_c])!r}{also})"
    return [
        f"{clean(p.model)}: patching {into} ({shape})",
        f"clean:     {clean(p.clean)!r}   {names[p.metric]} = {p.metric_clean:.4f}",
        f"corrupted: {clean(p.corrupted)!r}   {names[p.metric]} = {p.metric_corrupted:.4f}",
        f"recovery = (metric patched - corrupted) / (clean - corrupted), at {at}: 0 = the corrupted run, 1 = the "
        "clean run",
    ]


def pairing(p: Patching) -> str:
    """Prompts of two lengths: which positions were paired (runs of consecutive pairs) and which were left out."""
    runs = []  # [clean start, corrupted start, length]
    for i, j in p.paired():
        if runs and runs[-1][0] + runs[-1][2] == i and runs[-1][1] + runs[-1][2] == j:
            runs[-1][2] += 1
        else:
            runs.append([i, j, 1])
    spans = [_span(i, n) + ("" if i == j else f" -> {_span(j, n)}") for i, j, n in runs]
    left = []
    for who, labels, kept in (("clean", p.labels_clean, {a for a, _ in p.paired()}),
                              ("corrupted", p.labels_corrupted, {b for _, b in p.paired()})):  # fmt: skip
        out = [i for i in range(len(labels)) if i not in kept]
        if out:
            words = " ".join(clean(labels[i]) for i in out[:6]) + (" ..." if len(out) > 6 else "")
            left.append(f"{who} {_span(out[0], len(out))} {words!r}")
    return (f"clean {p.m} tokens, corrupted {len(p.labels_corrupted)}: paired {' and '.join(spans)}; left out "
            f"{', '.join(left) or 'none'}")  # fmt: skip


def _span(start: int, n: int) -> str:
    return f"{start}" if n == 1 else f"{start}..{start + n - 1}"


def emit(p: Patching, fmt: str, top: int, precision: int = 3, save_npz: str | None = None) -> None:
    if fmt == "json":
        from qkv_cli.views.export.results import write_json

        write_json(p.summary(), sys.stdout)
        sys.stdout.write("\n")
    else:
        table(p, top, precision)
    if save_npz is not None:
        from qkv_cli.views.export.writing import save_npz as save

        print(f"saved {save(p.arrays(), save_npz)}", file=sys.stderr)


def table(p: Patching, top: int, precision: int) -> None:
    from rich.table import Table
    from rich.text import Text

    from qkv_cli.views.console import console

    out = console()
    for i, line in enumerate(header(p)):
        out.print(Text(line), style="bold" if i == 0 else None)
    rows = p.top(top)
    order = "highest" if p.direction == "denoise" else "lowest"
    t = Table(title=f"Top {len(rows)} patches ({order} recovery first)", title_justify="left")
    for name, justify in (("what", "left"), ("layer", "right"), ("at", "left"), ("recovery", "right"),
                          ("metric", "right")):  # fmt: skip
        t.add_column(name, justify=justify)
    for r in rows:
        t.add_row(r["what"], str(r["layer"]), clean(r["label"]), f"{r['recovery']:.{precision}f}",
                  f"{r['metric']:.{precision}f}")  # fmt: skip
    out.print(t)
    says = {w: WHAT_SAYS[w].replace("key/value head g", "head j") if p.side else WHAT_SAYS[w] for w in p.what}
    shown = ", ".join(f"{w}: {says[w]}" for w in p.what)
    out.print(Text(f"patched: {shown}"))
    if p.side is not None:
        out.print(Text(SIDE_SAYS[p.side]))
