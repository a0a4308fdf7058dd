"""`qkv generate`: the text written, then one row per written token: its probability, the top alternatives, and the
earlier tokens the chosen layer and head (default: the last layer, every head averaged) looked at to write it."""

from __future__ import annotations

import json
import sys

import numpy as np

from qkv_cli.core.result import Result
from qkv_cli.views.console import clean

ATTENDED = 3


def focus(gen: Result, layer: int | None, heads) -> np.ndarray:  # -> (steps, n_max): the rows drawn and ranked
    """The writing query's weights at each step for one layer (default the last), averaged over `heads`."""
    rows = gen.step_attentions[:, -1 if layer is None else layer]  # (steps, tau, n_max)
    return rows[:, list(heads)].mean(axis=1)


def attended(gen: Result, layer: int | None, heads, skip: int = 0) -> list[list[dict]]:
    """Per step, the earlier tokens the layer's writing query (averaged over `heads`) gave most weight to; `skip`
    leaves out the first positions (1: the first token, the sink most layers dump their weight on)."""
    labels, w = gen.labels, focus(gen, layer, heads)
    out = []
    for t in range(len(gen.step_ids)):
        pos = gen.prompt_len + t
        best = skip + np.argsort(-w[t, skip:pos], kind="stable")[:ATTENDED]
        out.append([{"position": int(k), "token": labels[k], "weight": float(w[t, k])} for k in best])
    return out


def steps(gen: Result, layer: int | None, heads, skip: int = 0) -> list[dict]:
    """One dict per written token: token, id, prob, the top alternatives, the earlier tokens attended most."""
    if gen.context is not None:  # an encoder-decoder wrote: the source tokens its cross-attention read most
        from qkv_cli.views.console.encdec import steps as aligned

        return aligned(gen, layer, heads)
    labels, seen = gen.labels, attended(gen, layer, heads, skip)
    out = []
    for t, token in enumerate(gen.step_ids):
        pos = gen.prompt_len + t
        out.append({
            "step": t, "position": pos, "token": labels[pos], "id": int(token), "prob": float(gen.step_probs[t]),
            "top": [{"token": label, "id": int(i), "prob": float(p)} for label, i, p in
                    zip(gen.step_top_labels[t], gen.step_top_ids[t], gen.step_top_probs[t], strict=True)],
            "attended": seen[t],
        })  # fmt: skip
    return out


class Stream:
    """Writes the text to a terminal as the model writes it: called with the ids so far, it writes what their
    decoding adds; a character still incomplete (a byte-level token ending mid-UTF-8: U+FFFD) waits for the next."""

    def __init__(self, tokenizer, out=None):
        self.tokenizer, self.out, self.shown = tokenizer, out or sys.stdout, ""

    def __call__(self, ids) -> None:
        text = self.tokenizer.decode(list(ids), skip_special_tokens=False).rstrip("\ufffd")
        if text.startswith(self.shown) and len(text) > len(self.shown):
            self.out.write(clean(text[len(self.shown) :]))
            self.out.flush()
            self.shown = text

    def end(self) -> None:
        self.out.write("\n")
        self.out.flush()


def emit(gen: Result, layers: list[int] | None, heads, precision: int, fmt: str, save_npz=None,
         skip: int = 0, streamed: bool = False) -> None:  # fmt: skip
    """The rows for each of `layers` (default: the last); "attended" is the first layer's. `skip`: leave the first
    position out of the ranking; `streamed`: the text is on the terminal already (Stream)."""
    layers = layers or [gen.model.n_layers - 1]
    rows = steps(gen, layers[0], heads, skip)
    for layer in layers:
        for r, seen in zip(rows, attended(gen, layer, heads, skip), strict=True):
            r.setdefault("attended_by_layer", {})[str(layer)] = seen
    where = ("layer " if len(layers) == 1 else "layers ") + ", ".join(map(str, layers)) + ", " + (
        "every head averaged" if len(heads) == gen.step_attentions.shape[2] else f"heads {', '.join(map(str, heads))}"
    ) + (", after the first token" if skip else "")  # fmt: skip
    if fmt == "json":
        doc = {"model": gen.model.name, "prompt": gen.labels[: gen.prompt_len], "text": gen.text,
               "attention_of": where, "layers": layers, "exclude_first": bool(skip), "cache_bytes": gen.cache_bytes,
               "timing": gen.timing, "steps": rows}  # fmt: skip
        sys.stdout.write(json.dumps(doc) + "\n")
    elif fmt == "csv":
        import csv

        names = ["attended"] if len(layers) == 1 else [f"attended_layer{layer}" for layer in layers]
        writer = csv.writer(sys.stdout, lineterminator="\n")
        writer.writerow(["step", "position", "token", "id", "prob", "top", *names])
        for r in rows:
            top = " ".join(f"{a['token']}:{a['prob']:.6g}" for a in r["top"])
            seen = [" ".join(f"{a['position']}:{a['token']}:{a['weight']:.6g}" for a in r["attended_by_layer"][str(l)])
                    for l in layers]  # fmt: skip
            writer.writerow([r["step"], r["position"], r["token"], r["id"], repr(r["prob"]), top, *seen])
    else:
        table_view(gen, rows, layers, where, precision, streamed, skip)
    if save_npz is not None:
        from qkv_cli.views.export.writing import save_npz as save

        print(f"saved {save(arrays(gen), save_npz)}", file=sys.stderr)


def table_view(gen: Result, rows: list[dict], layers: list[int], where: str, precision: int, streamed: bool = False,
               skip: int = 0) -> None:  # fmt: skip
    from rich import box
    from rich.table import Table
    from rich.text import Text

    from qkv_cli.views.console import console
    from qkv_cli.views.console.tables import short

    out = console()
    out.print(Text(f"{clean(gen.model.name)} ({gen.model.family}) wrote {len(rows)} tokens after a prompt of "
                   f"{gen.prompt_len}" + (" (the text above)" if streamed else ":")), style="bold")  # fmt: skip
    if not streamed:
        out.print(Text(clean(gen.text)))
    table = Table(title=f"Each written token: its probability, the alternatives, and what it read ({where})",
                  box=box.SIMPLE_HEAD, title_justify="left", padding=(0, 1))  # fmt: skip
    most = ["attended most"] if len(layers) == 1 else [f"attended most, layer {layer}" for layer in layers]
    for name in ("step", "token", "prob", "top 5", *most):
        table.add_column(name, justify="right" if name in ("step", "prob") else "left")
    p = precision
    for r in rows:
        top = " ".join(f"{short(a['token'], 8)} {a['prob']:.{p}f}" for a in r["top"])
        seen = [Text(" ".join(f"{short(a['token'], 8)}@{a['position']} {a['weight']:.{p}f}" for a in by))
                for by in r["attended_by_layer"].values()]  # fmt: skip
        table.add_row(str(r["step"]), Text(short(r["token"], 12)), f"{r['prob']:.{p + 1}f}", Text(top), *seen)
    out.print(table)
    out.print(
        f"KV cache at the end: {gen.cache_bytes:,} bytes for {len(gen.labels) - 1} tokens" + timing(gen), style="dim"
    )
    sunk = sum(r["attended"][0]["position"] == 0 for r in rows if r["attended"])
    if not skip and sunk * 2 > len(rows):
        out.print(f"The first token is the most attended in {sunk} of {len(rows)} steps (a sink most layers put "
                  "spare weight on): --exclude-first ranks the tokens after it", style="dim")  # fmt: skip


def timing(gen: Result) -> str:
    """ "; 0.12 s a token after the prompt's 0.80 s": the time a written token took, beside the prefill's."""
    t = gen.timing
    if not t:
        return ""
    return f"; {t['seconds_per_token']:.3g} s a token after the prompt's {t['prefill_seconds']:.3g} s"


def arrays(gen: Result) -> dict:
    """NPZ: ids, tokens (the tokenizer's strings), labels (as shown), step_probs, step_attentions
    (steps, L, tau, n_max; zeros past each step), prompt_len; a model with sinks adds step_sinks (steps, L, tau)."""
    sinks = {} if gen.step_sinks is None else {"step_sinks": gen.step_sinks}
    return sinks | {"ids": np.asarray(gen.ids), "tokens": np.array(list(gen.tokens.strings), dtype=str),
            "labels": np.array(gen.labels, dtype=str),
            "step_ids": gen.step_ids, "step_probs": gen.step_probs, "step_top_ids": gen.step_top_ids,
            "step_top_probs": gen.step_top_probs, "step_attentions": gen.step_attentions,
            "prompt_len": np.int64(gen.prompt_len), "model": np.array(gen.model.name)}  # fmt: skip


def heatmap_figure(gen: Result, heads, layer: int | None = None, scale: str = "linear"):
    """Rows: the written tokens; columns: every token so far; a cell is what the writing query gave that key."""
    from qkv_cli.views.figures.heatmaps import draw_grid

    w = focus(gen, layer, heads)
    steps, n = w.shape
    reach = gen.prompt_len + np.arange(steps)[:, None]  # step t read positions 0 .. prompt_len + t - 1
    masked = np.arange(n)[None, :] >= reach
    rows = [gen.labels[gen.prompt_len + t] for t in range(steps)]
    which = f"layer {gen.model.n_layers - 1 if layer is None else layer}, " + (
        "heads averaged" if len(heads) == gen.step_attentions.shape[2] else "heads " + ",".join(map(str, heads))
    )
    title = f"{clean(gen.model.name)}: what each written token read"
    subtitle = f"rows: the {steps} tokens written, columns: every token before them; {which}"
    return draw_grid([("", w, masked)], rows, gen.labels[:n], title, subtitle, scale,
                     settings=f"{subtitle}; kernel={gen.kernel}")  # fmt: skip
