"""Glue for the learning commands between the CLI and the core: read --context / --mask-file, run one sentence per
line, build the mask grid of `qkv mask`, gather head roles for `qkv heads`. No typer here."""

from __future__ import annotations

from qkv_cli.errors import QkvError


def read_inputs(settings, context, context_file, mask_file, text_from_stdin: bool = False) -> dict:
    """Keyword arguments for pipeline.run: `context` (str) and `allowed` (bool grid), checked cheapest first."""
    from qkv_cli import cross

    cross.check(settings, context is not None or context_file is not None)
    extras = {}
    allowed = None if mask_file is None else _load_mask(mask_file)
    ctx = cross.get_context(context, context_file, text_from_stdin)
    if ctx is not None:
        extras["context"] = ctx
    if allowed is not None:
        extras["allowed"] = allowed
    return extras


def _load_mask(path):
    from qkv_cli.maskgrid import load_mask_file

    return load_mask_file(path)


def lines_of(text: str | None, file: str | None) -> list[str]:
    from qkv_cli.batch import sentences
    from qkv_cli.inputs import get_text

    return sentences(get_text(text, file))


def run_lines(file: str, settings, max_memory, extras: dict) -> list:
    """One pipeline Result per non-empty line of `file`."""
    from qkv_cli.pipeline import run

    return [run(line, settings, max_memory=max_memory, **extras) for line in lines_of(None, file)]


def run_batch_text(text, file, settings, max_memory, extras: dict):
    """--batch: the lines of TEXT or --file, padded to the longest and run together."""
    from qkv_cli.batch import run_batch

    if extras:
        used = " and ".join(x for x, k in (("--context", "context"), ("--mask-file", "allowed")) if k in extras)
        raise QkvError(
            f"--batch cannot be combined with {used}: every sentence has its own length; run them one at a time instead"
        )
    return run_batch(lines_of(text, file), settings, max_memory)


def mask_command(text, file, causal, window, context, context_file, mask_file, pad_to, tokenizer, fmt) -> None:
    """`qkv mask`: which rule removed each cell of the combined Mask."""
    import numpy as np

    from qkv_cli import cross, maskgrid
    from qkv_cli.inputs import get_text
    from qkv_cli.learn_views import emit_mask
    from qkv_cli.samples import sample_text
    from qkv_cli.tokens import tokenize

    has_context = context is not None or context_file is not None
    if has_context and (causal or window is not None):
        from types import SimpleNamespace

        cross.check(SimpleNamespace(causal=causal, window=window), True)
    custom = None if mask_file is None else _load_mask(mask_file)
    ctx = cross.get_context(context, context_file, text == "-" or file == "-")
    labels = list(tokenize(get_text(text, file, sample_text("short")), tokenizer).labels)
    key_labels = labels if ctx is None else list(tokenize(ctx, tokenizer).labels)
    m, n = len(labels), len(key_labels)
    padding = None
    if pad_to is not None:
        if pad_to < n:
            raise QkvError(
                f"--pad-to {pad_to} is shorter than the {'context' if ctx else 'text'} ({n} tokens): use {n} or more"
            )
        maskgrid.check_cells(m if ctx else pad_to, pad_to)
        pad = ["[PAD]"] * (pad_to - n)
        if ctx is None:
            labels = labels + pad
            m = pad_to
        key_labels = key_labels + pad
        n = pad_to
        padding = np.arange(n) >= n - len(pad)
    maskgrid.check_cells(m, n)
    grids = maskgrid.rule_grids(m, n, causal=causal, window=window, padding=padding, custom=None)
    if custom is not None:
        maskgrid.check_shape(custom, m, n, f"--mask-file {mask_file!r}")
        grids = maskgrid.rule_grids(m, n, causal=causal, window=window, padding=padding, custom=custom)
    emit_mask(labels, key_labels, grids, maskgrid.allowed_grid(grids, m, n), fmt, window)


def mask_model_command(spec: str, text, file, download: bool, fmt: str) -> None:
    """`qkv mask --model M`: the checkpoint's own Mask over its own tokens ([CLS]/[SEP] included for BERT)."""
    import numpy as np

    from qkv_cli import checkpoint, maskgrid
    from qkv_cli.inputs import get_text
    from qkv_cli.learn_views import emit_mask
    from qkv_cli.samples import sample_text

    model = checkpoint.load(spec, "float64", download)
    labels = list(model.tokenize(get_text(text, file, sample_text("short"))).labels)
    m = len(labels)
    maskgrid.check_cells(m, m)
    additive = model.family.mask(m, np.float64)  # None (BERT: bidirectional) or (m, m) causal (GPT-2)
    grids = {} if additive is None else {"causal": np.isneginf(additive)}
    info = {"name": model.config.name or model.name, "family": model.config.family}
    emit_mask(labels, labels, grids, maskgrid.allowed_grid(grids, m, m), fmt, model=info)


def emit_roles(results, fmt: str) -> None:
    """`qkv heads` for pipeline Results (one layer each): per-head statistics aggregated over the sentences."""
    from qkv_cli.learn_views import emit_heads
    from qkv_cli.roles import layer_head_stats
    from qkv_cli.views import settings_line

    if any("H_context" in r.extra.get("arrays", {}) for r in results):
        raise QkvError(
            "qkv heads needs self-attention (self, previous and first token are positions of one text): drop --context"
        )
    stats = layer_head_stats([r.weights[None] for r in results], [~r.masked for r in results])
    header = settings_line(results[0]).split(" ", 1)[1]  # without m: lines differ in length
    emit_heads(stats, fmt, header, len(results))
