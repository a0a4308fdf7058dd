"""What `qkv run` and `qkv heatmap` show, chosen by the Result's kind in one table each."""

from __future__ import annotations

from qkv_cli.core.result import Kind, Result
from qkv_cli.views import attribution, band, batch, generate, layer, model

RENDERERS = {
    Kind.DENSE: layer.emit_layer,
    Kind.LAYER: layer.emit_layer,
    Kind.BAND: band.emit,
    Kind.MODEL: model.emit_run,
    Kind.BATCH: batch.emit,
    Kind.GENERATION: lambda result, show, heads, precision, fmt, save_npz=None: generate.emit(
        result, None, heads, precision, fmt, save_npz
    ),
    Kind.ATTRIBUTION: attribution.emit,
}
HEATMAPS = {  # kind -> draw(result, heads, path, layer given or None, colour scale)
    Kind.DENSE: lambda result, heads, path, at, scale: layer.heatmap_layer(result, heads, path, scale),
    Kind.LAYER: lambda result, heads, path, at, scale: layer.heatmap_layer(result, heads, path, scale),
    Kind.BAND: lambda result, heads, path, at, scale: band.save_heatmap(result, heads, path, scale),
    Kind.MODEL: lambda result, heads, path, at, scale: model.save_heatmap(result, heads, at is not None, path, scale),
    Kind.GENERATION: lambda result, heads, path, at, scale: generate.save_heatmap(result, heads, path, at, scale),
    Kind.ATTRIBUTION: lambda result, heads, path, at, scale: attribution.save_heatmap(result, heads, path, scale),
}


def emit(result: Result, show, heads, precision, fmt, save_npz=None) -> None:
    """Print the result in the chosen format; then save the NPZ if asked."""
    RENDERERS[result.kind](result, show, heads, precision, fmt, save_npz)


def save_heatmap(result: Result, heads, path, layer: int | None = None, scale: str = "linear") -> str:
    """layer: the --layer given (a checkpoint's heads of that layer; a generation ranked in it), or None;
    scale: the colour scale (views.figures.SCALES)."""
    return HEATMAPS[result.kind](result, heads, path, layer, scale)


def heatmap_figure(result: Result, heads, layer: int | None = None, scale: str = "linear"):
    """The matplotlib Figure save_heatmap would write, unwritten (the Python API's qkv.heatmap)."""
    from qkv_cli.views.figures import kept

    with kept() as got:
        HEATMAPS[result.kind](result, heads, "figure.png", layer, scale)
    return got[-1]
