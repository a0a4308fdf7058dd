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


def _layer_figure(result, heads, at, scale):
    return layer.heatmap_figure(result, heads, scale)


FIGURES = {  # kind -> draw(result, heads, layer given or None, colour scale) -> a matplotlib Figure
    Kind.DENSE: _layer_figure,
    Kind.LAYER: _layer_figure,
    Kind.BAND: lambda result, heads, at, scale: band.heatmap_figure(result, heads, scale),
    Kind.MODEL: lambda result, heads, at, scale: model.heatmap_figure(result, heads, at is not None, scale),
    Kind.GENERATION: lambda result, heads, at, scale: generate.heatmap_figure(result, heads, at, scale),
    Kind.ATTRIBUTION: lambda result, heads, at, scale: attribution.heatmap_figure(result, heads, scale),
}


def emit(result: Result, show, heads, precision, fmt, save_npz=None, stream=None) -> None:
    """Print the result in the chosen format; then save the NPZ if asked. stream: the views.stream_export writer
    that already wrote a checkpoint run's layers as they were made (it closes the document)."""
    if stream is not None and stream.started and result.kind == Kind.MODEL:
        return model.emit_run(result, show, heads, precision, fmt, save_npz, stream=stream)
    RENDERERS[result.kind](result, show, heads, precision, fmt, save_npz)


def heatmap_figure(result: Result, heads, layer: int | None = None, scale: str = "linear"):
    """The heatmap of a result as a matplotlib Figure, nothing written (``qkv heatmap`` saves it, the Python API
    returns it). layer: the --layer given (a checkpoint's heads of that layer; a generation ranked in it), or None;
    scale: the colour scale (views.figures.SCALES)."""
    return FIGURES[result.kind](result, heads, layer, scale)
