"""qkv attribute --format json or csv: its size, from the text's tokens before the run (core.output_size)."""

from __future__ import annotations


def check_attribution(fmt: str | None, limit: int, req, model, tau: int) -> None:
    """qkv attribute --format json or csv: the attribution, each head's and the weights (tau x m x n each) of one
    layer, refused above `limit` from the text's tokens alone, before anything runs (stdin and an encoder-decoder: not
    counted)."""
    if fmt not in ("json", "csv"):
        return
    from qkv_cli.core.output_size import check_count
    from qkv_cli.pipeline.compute import panel_size

    size = panel_size(
        req.changed(method=None, head_fusion=None), model
    )  # the text's tokens, as the attributed run reads them
    if size is None:
        return
    m, n = size
    shape = f"{tau} heads x {m:,} rows x {n:,} keys of the attribution and the weights"
    check_count(fmt, m * n * (1 + 2 * tau) + tau * n, limit, shape, "a shorter text, or --save-npz FILE (binary)")
