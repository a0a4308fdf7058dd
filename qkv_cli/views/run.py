"""What `qkv run` and `qkv heatmap` show, chosen by the Result's kind in one table each."""

from __future__ import annotations

from qkv_cli.core.result import Kind, Result
from qkv_cli.views import band, batch, layer, model

RENDERERS = {
    Kind.DENSE: layer.emit_layer,
    Kind.LAYER: layer.emit_layer,
    Kind.BAND: band.emit,
    Kind.MODEL: model.emit_run,
    Kind.BATCH: batch.emit,
}
HEATMAPS = {
    Kind.DENSE: lambda result, heads, path, layer_given: layer.heatmap_layer(result, heads, path),
    Kind.LAYER: lambda result, heads, path, layer_given: layer.heatmap_layer(result, heads, path),
    Kind.BAND: lambda result, heads, path, layer_given: band.save_heatmap(result, heads, path),
    Kind.MODEL: lambda result, heads, path, layer_given: model.save_heatmap(result, heads, layer_given, path),
}


def emit(result: Result, show, heads, precision, fmt, save_npz=None) -> None:
    """Print the result in the chosen format; then save the NPZ if asked."""
    RENDERERS[result.kind](result, show, heads, precision, fmt, save_npz)


def save_heatmap(result: Result, heads, path, layer_given: bool = False) -> str:
    return HEATMAPS[result.kind](result, heads, path, layer_given)
