"""qkv attribute --format json or csv: its size, from the text's tokens before the run (core.output_size)."""

from __future__ import annotations


def check_attribution(fmt: str | None, limit: int, req, model, tau: int) -> None:
    """qkv attribute --format json or csv: the attribution, each head's and the weights (tau x m x n each) of one
    layer, refused above `limit` from the text's tokens alone, before anything runs (stdin: not counted)."""
    if fmt not in ("json", "csv"):
        return
    from qkv_cli.core.output_size import check_count
    from qkv_cli.pipeline.compute import panel_size

    if model is not None and model.is_encoder_decoder:
        size = encdec_size(req, model)
    else:  # the text's tokens, as the attributed run reads them
        size = panel_size(req.changed(method=None, head_fusion=None), model)
    if size is None:
        return
    m, n = size
    shape = f"{tau} heads x {m:,} rows x {n:,} keys of the attribution and the weights"
    check_count(fmt, m * n * (1 + 2 * tau) + tau * n, limit, shape, "a shorter text, or --save-npz FILE (binary)")


def encdec_size(req, model) -> tuple[int, int] | None:
    """(queries, keys) of an encoder-decoder's attention --attention (default cross) over the source and --target."""
    from qkv_cli.pipeline.compute import read_text
    from qkv_cli.pipeline.encdec.run import decoder_tokens

    if "-" in (req.inputs.text, req.inputs.file):
        return None
    n = len(model.tokenize(read_text(req)))
    m = len(decoder_tokens(model, req.encdec.target))
    attention = req.encdec.attention or "cross"
    return {"encoder": (n, n), "decoder": (m, m), "cross": (m, n)}[attention]
