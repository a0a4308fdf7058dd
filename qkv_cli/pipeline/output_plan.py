"""The size of a run's JSON or CSV, from its shapes before the forward (core.output_size): a checkpoint's layers,
heads, rows and keys, or one random-weights layer's; refused above --max-output before any weight is read."""

from __future__ import annotations

from qkv_cli.core.output_size import Layout, Output, check_output, output_bytes


def mean_label(labels) -> float:
    return sum(len(str(s)) for s in labels) / max(1, len(labels))


def checkpoint_layout(model, tokens, chosen, keep, span, heads=None) -> Layout:
    """A checkpoint run's shapes: the chosen layers detailed, the kept layers' weights (keep None: every layer)."""
    c, m = model.config, len(tokens)
    R = m if span is None else span[1] - span[0]
    tau = c.n_heads if not heads else len(heads)
    kept = c.n_layers if keep is None else len(keep)
    return Layout(R=R, n=m, d=c.d, d_k=c.d_k, tau=tau, G=c.G, layers=len(chosen), kept_layers=kept, kept_heads=tau,
                  label=mean_label(tokens.labels))  # fmt: skip


def narrowed(output: Output | None, model, tokens, chosen, keep, span):
    """keep, or the chosen layers alone when every layer's weights would make the output exceed its limit."""
    if output is None or keep is not None or len(chosen) >= model.config.n_layers or output.fmt != "json":
        return keep
    if output_bytes(output, checkpoint_layout(model, tokens, chosen, None, span, output.heads)) > output.limit:
        return list(chosen)
    return keep


def check_checkpoint(output: Output | None, model, tokens, chosen, keep, span, given) -> None:
    """Refuse a checkpoint run whose output would exceed --max-output; given: the options already narrowing it."""
    if output is None:
        return
    flags = [f"--{name}" for name in given if name in ("layer", "rows")] + (["--head"] if output.heads else [])
    s = checkpoint_layout(model, tokens, chosen, keep, span, output.heads)
    check_output(output, s, flags, model.dtype.itemsize)


def check_dense(output: Output | None, settings, tokens, n: int) -> None:
    """Refuse a random-weights run whose output would exceed --max-output (one layer: no --layer, no --rows)."""
    if output is None:
        return
    tau = settings.tau if not output.heads else len(output.heads)
    s = Layout(R=len(tokens), n=n, d=settings.d, d_k=settings.d_k, tau=tau, G=settings.G,
               label=mean_label(tokens.labels))  # fmt: skip
    itemsize = 4 if settings.dtype == "float32" else 8
    given = ("--head",) if output.heads else ()
    check_output(output, s, given, itemsize, "--head, a shorter text, or --save-npz FILE")
