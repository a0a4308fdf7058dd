"""qkv attribute --format json or csv: its size, from the text's tokens before the run (core.output_size)."""

from __future__ import annotations


def check_attribution(fmt: str | None, limit: int, req, model, tau: int) -> None:
    """qkv attribute --format json or csv: the attribution, each head's and the weights (tau x m x n each) of one
    layer, refused above `limit` from the text's tokens alone, before anything runs (stdin read once, then kept)."""
    if fmt not in ("json", "csv"):
        return
    from qkv_cli.core.output_size import check_count
    from qkv_cli.pipeline.compute import panel_tokens
    from qkv_cli.pipeline.output_plan import mean_label

    if model is not None and model.is_encoder_decoder:
        tokens = encdec_tokens(req, model)
    else:  # the text's tokens, as the attributed run reads them
        tokens = panel_tokens(req.changed(method=None, head_fusion=None), model)
    if tokens is None:
        return
    m, n = len(tokens[0]), len(tokens[1])
    shape = f"{tau} heads x {m:,} rows x {n:,} keys of the attribution and the weights"
    label = (mean_label(tokens[0].labels) + mean_label(tokens[1].labels)) / 2  # a CSV row: a query's and a key's
    check_count(fmt, m * n * (1 + 2 * tau) + tau * n, limit, shape, "a shorter text, or --save-npz FILE (binary)",
                label=label)  # fmt: skip


def encdec_tokens(req, model):
    """(the queries' Tokens, the keys' Tokens) of an encoder-decoder's attention --attention (default cross) over the
    source and --target."""
    from qkv_cli.pipeline.compute import read_text
    from qkv_cli.pipeline.encdec.run import decoder_tokens

    source, target = model.tokenize(read_text(req)), decoder_tokens(model, req.encdec.target)
    attention = req.encdec.attention or "cross"
    return {"encoder": (source, source), "decoder": (target, target), "cross": (target, source)}[attention]
