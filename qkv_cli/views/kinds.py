"""Each kind of Result with all its views in one place: how it prints (a table, JSON or CSV, then its NPZ), how it
draws (`qkv heatmap`, `qkv.heatmap`), what its NPZ holds (`--save-npz`, `.arrays()`) and what its page shows
(`qkv view`, `qkv.page`). A new kind of run is one entry here; every command and the API dispatch through it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from qkv_cli.core.result import Kind, Result
from qkv_cli.errors import QkvError
from qkv_cli.views import attribution, band, batch, generate, layer, model
from qkv_cli.views.export import results as export
from qkv_cli.views.page import html


@dataclass(frozen=True)
class KindViews:
    emit: Callable  # (result, show, heads, precision, fmt, save_npz) -> None: printed, then the NPZ if asked
    figure: Callable | None  # (result, heads, the --layer given or None, colour scale) -> a matplotlib Figure
    arrays: Callable  # (result) -> {export name: array}: the NPZ
    page: Callable | None  # (result, kv_heads, layer) -> the page's own part of its data (views.page.html)


def _generation_emit(result, show, heads, precision, fmt, save_npz=None) -> None:
    generate.emit(result, None, heads, precision, fmt, save_npz)


KINDS = {
    Kind.SEEDED: KindViews(layer.emit_layer, lambda r, heads, at, scale: layer.heatmap_figure(r, heads, scale),
                           export.layer_arrays, lambda r, kv, at: html.dense_page(r)),
    Kind.LAYER: KindViews(layer.emit_layer, lambda r, heads, at, scale: layer.heatmap_figure(r, heads, scale),
                          export.layer_arrays, lambda r, kv, at: html.dense_page(r)),
    Kind.BAND: KindViews(band.emit, lambda r, heads, at, scale: band.heatmap_figure(r, heads, scale),
                         export.band_arrays, lambda r, kv, at: html.band_page(r)),
    Kind.MODEL: KindViews(model.emit_run, lambda r, heads, at, scale: model.heatmap_figure(r, heads, at is not None,
                          scale), export.model_arrays, lambda r, kv, at: html.model_page(r)),
    Kind.BATCH: KindViews(batch.emit, None, export.batch_arrays, lambda r, kv, at: html.batch_page(r)),
    Kind.GENERATION: KindViews(_generation_emit, generate.heatmap_figure, generate.arrays, html.generation_page),
    Kind.ATTRIBUTION: KindViews(attribution.emit, lambda r, heads, at, scale: attribution.heatmap_figure(r, heads,
                                scale), attribution.arrays, lambda r, kv, at: html.attribution_page(r)),
}  # fmt: skip


def emit(result: Result, show, heads, precision, fmt, save_npz=None, stream=None) -> None:
    """Print the result in the chosen format; then save the NPZ if asked. stream: the views.streaming writer
    that already wrote a checkpoint run's layers as they were made (it closes the document)."""
    if stream is not None and stream.started and result.kind == Kind.MODEL:
        return model.emit_run(result, show, heads, precision, fmt, save_npz, stream=stream)
    KINDS[result.kind].emit(result, show, heads, precision, fmt, save_npz)


def heatmap_figure(result: Result, heads, layer: int | None = None, scale: str = "linear"):
    """The heatmap of a result as a matplotlib Figure, nothing written (``qkv heatmap`` saves it, the Python API
    returns it). layer: the --layer given (a checkpoint's heads of that layer; a generation ranked in it), or None;
    scale: the colour scale (views.figures.heatmaps.SCALES)."""
    return KINDS[result.kind].figure(result, heads, layer, scale)


def arrays(result: Result) -> dict:
    """What --save-npz writes for any Result."""
    return KINDS[result.kind].arrays(result)


def page_data(result: Result, kv_heads: int | None = None, layer: int | None = None) -> dict:
    """Everything the page shows, by the Result's kind (views.page.data says how it is encoded). kv_heads and
    layer: what a generation does not record (the model's G, the layer to show first)."""
    build = KINDS[result.kind].page
    if build is None:
        shown = ", ".join(k.value for k, v in KINDS.items() if v.page is not None)
        raise QkvError(f"qkv view cannot show a {result.kind.value} run: it shows {shown}")
    return html.page_doc(result, build(result, kv_heads, layer))


def render(result: Result, **options) -> str:
    """The whole page as one string (options: page_data's kv_heads and layer)."""
    return html.render_doc(page_data(result, **options))


def rendered(result: Result, **options) -> tuple[str, str]:
    """The whole page and what it holds (html.contents), for a page saved later (api.show.Page)."""
    doc = page_data(result, **options)
    return html.render_doc(doc), html.contents(doc)


def save_page(result: Result, path, max_bytes: int = html.MAX_PAGE, **options) -> str:
    """Write the page atomically, unless it would exceed max_bytes; return the one line qkv view prints (its
    size and what it holds). options: see page_data."""
    page, holds = rendered(result, **options)
    return html.write_page(page, holds, path, max_bytes)
