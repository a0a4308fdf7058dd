"""The size of a run's JSON or CSV, from its shapes before the forward (core.output_size): a checkpoint's layers,
heads, rows and keys, or one random-weights layer's; refused above --max-output before any weight is read."""

from __future__ import annotations

from qkv_cli.core.budget import without
from qkv_cli.core.output_size import CSV_FIXED, JSON_NUMBER, Layout, Output, check_output, check_size, output_bytes


def count(k: int, noun: str) -> str:
    return f"{k:,} {noun}{'' if k == 1 else 's'}"


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


def _heads(output, tau: int) -> int:
    return len(output.heads) if output.heads else tau


def check_batch(output: Output | None, settings, toks) -> None:
    """Refuse a --batch run whose output would exceed --max-output: each sentence's layer, without its pads."""
    if output is None:
        return
    tau = _heads(output, settings.tau)
    size = sum(output_bytes(output, Layout(R=len(t), n=len(t), d=settings.d, d_k=settings.d_k, tau=tau,
                                           G=settings.G, label=mean_label(t.labels))) for t in toks)  # fmt: skip
    longest, shown = max(len(t) for t in toks), ", ".join(output.show)
    shape = f"{count(len(toks), 'sentence')} of up to {longest:,} tokens x {count(tau, 'head')} of --show {shown}"
    hints = without("--head, fewer lines, shorter lines, or --save-npz FILE", ["--head"] if output.heads else [])
    check_size(output.fmt, size, output.limit, shape, hints)


def check_band(output: Output | None, settings, tokens, n_c: int) -> None:
    """Refuse a long text's band (--window) whose output would exceed --max-output: CSV lists every weight in the
    band (tau x about m x n_c), JSON each head's summary and strongest links."""
    if output is None:
        return
    tau, m, label = _heads(output, settings.tau), len(tokens), mean_label(tokens.labels)
    cells = n_c * m - n_c * (n_c - 1) // 2 if m >= n_c else m * (m + 1) // 2  # sum_i min(i + 1, n_c)
    if output.fmt == "csv":
        size = int(tau * cells * (CSV_FIXED + 2 * len(str(m)) + 2 * label))
    else:  # the tokens, then per head its summary (7 numbers) and 8 links (query, key, weight)
        size = int(m * (label + 4) + tau * (7 + 8 * 3) * JSON_NUMBER)
    shape = f"{count(tau, 'head')} x {m:,} rows x {n_c} keys of the band"
    hints = "--head, a smaller --window, a shorter text, or --save-npz FILE"
    hints = without(hints, ["--head"] if output.heads else [])
    check_size(output.fmt, size, output.limit, shape, hints)


def check_encdec(output: Output | None, model, src, dec, attention: str, chosen, layers_given: bool = False) -> None:
    """Refuse an encoder-decoder run (--target, --attention) whose output would exceed --max-output: the chosen
    layers' matrices of that attention and, in JSON, all three attentions of every layer (transformers' names)."""
    if output is None:
        return
    c, n, m = model.config, len(src), len(dec)
    queries, keys = (src, src) if attention == "encoder" else (dec, dec if attention == "decoder" else src)
    L, tau = model.n_layers(attention), model.n_heads(attention)
    three = c.n_layers * c.n_heads * n * n + model.dec_layers * model.dec_heads * (m * m + m * n) + n * c.d
    s = Layout(R=len(queries), n=len(keys), d=c.d, d_k=c.d_k, tau=_heads(output, tau), G=tau, layers=len(chosen),
               kept_layers=L, kept_heads=tau, label=mean_label(queries.labels), extra=three)  # fmt: skip
    given = ["--head"] * bool(output.heads) + ["--layer"] * layers_given
    check_output(
        output, s, given, model.dtype.itemsize, "--layer, --head, a shorter source or target, or --save-npz FILE"
    )


def check_generation(output: Output | None, model, steps: int, n_source: int | None = None) -> None:
    """Refuse a generation whose output would exceed --max-output, counting every step it may write: a decoder's
    rows (the token, its top alternatives, the tokens read most in each shown layer), an encoder-decoder's
    alignment over the n_source tokens and, in JSON, its cross-attention (steps x L_dec x tau x n)."""
    if output is None:
        return
    label = 8  # a written token's label, quoted (CSV: with its position or weight beside it)
    if n_source is None:  # JSON: step, position, token, id, prob; 5 alternatives x 3; 3 tokens read x 3 per layer
        shape = f"{steps:,} tokens x {count(output.shown_layers, 'layer')}"
        json_step = (5 + 5 * 3 + output.shown_layers * 3 * 3) * JSON_NUMBER
        csv_step = CSV_FIXED + 5 * (label + 10) + output.shown_layers * 3 * (label + 12)
        hints = "--max-new-tokens, fewer --layer, or --save-npz FILE"
    else:  # JSON: the step, its 3 source tokens read most, the alignment row, the cross-attention; CSV: the row
        L, tau = model.decoder_shape
        shape = f"{steps:,} tokens x {count(L, 'layer')} x {count(tau, 'head')} x {n_source:,} source tokens"
        json_step = (4 + 3 * 3 + n_source + L * tau * n_source) * JSON_NUMBER
        csv_step = CSV_FIXED + 8 * n_source  # the weights with --precision 3 (and a comma)
        hints = "--max-new-tokens, a shorter source, or --save-npz FILE"
    check_size(output.fmt, steps * (json_step if output.fmt == "json" else csv_step), output.limit, shape, hints)


def check_mask(output: Output | None, grids) -> None:
    """Refuse qkv mask --format json above --max-output: per grid (pipeline.maskgrid.MaskGrid) every cell's
    `allowed`, the rules that removed it and its additive mask (0.0 or null), beside the tokens."""
    if output is None or output.fmt != "json":
        return
    size = 0
    for g in grids:
        m, n = g.allowed.shape
        kept = int(g.allowed.sum())
        size += kept * len("true, [], 0.0, ") + (m * n - kept) * len("false, [], null, ")
        size += sum((len(rule) + 4) * int(x.sum()) for rule, x in g.grids.items())  # '"causal", ' in removed_by
        size += int((m + n) * (mean_label(g.labels) + 4))
    m, n = grids[0].allowed.shape
    shape = f"{count(len(grids), 'grid')} of {m:,} queries x {n:,} keys"
    check_size("json", size, output.limit, shape, "a shorter text" + (", or one --layer" if len(grids) > 1 else ""))


def check_explain(output: Output | None, size: tuple[int, int] | None, settings, model) -> None:
    """Refuse qkv explain --format json above --max-output, from the text's (m queries, n keys) before anything
    runs: one head's walk, H (m x d), W^q, W^k, W^v (d x d_k), Q, K, V, scores, Mask, weights (m x n), its output,
    concat, W^o (tau d_k x d) and the layer's output (size None: not known before the run, not counted)."""
    if output is None or output.fmt != "json" or size is None:
        return
    m, n = size
    c = settings if model is None else model.config
    d, d_k, tau = c.d, c.d_k, c.tau if model is None else c.n_heads
    count = 2 * m * d + 3 * d * d_k + (m + 2 * n) * d_k + 3 * m * n + m * d_k + m * tau * d_k + tau * d_k * d
    shape = f"1 head x {m:,} rows x {n:,} keys, d={d:,}"
    check_size("json", count * JSON_NUMBER, output.limit, shape, "a shorter text")
