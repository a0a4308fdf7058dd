"""heatmap, page, heads: what the CLI draws and writes, returned as objects (a Figure, a Page, rows).

Nothing is written until you ask: ``fig.savefig("a.png")``, ``page.save("a.html")``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from qkv_cli.errors import QkvError, owning_float_errors

if TYPE_CHECKING:  # for the hints only (x: an api.results.Output, not imported: results imports this module)
    from os import PathLike

    from qkv_cli.core.result import Result
    from qkv_cli.views.figures.heatmaps import Figure
    from qkv_cli.views.figures.style import FigureStyle


def _heads(heads, tau: int) -> list[int]:
    if heads is None:
        return list(range(tau))
    if isinstance(heads, int) and not isinstance(heads, bool):
        heads = [heads]
    if not isinstance(heads, Sequence) or not heads or not all(isinstance(j, int) for j in heads):
        raise QkvError(f"heads must be a head number or a list of them, got {heads!r}")
    bad = [j for j in heads if not 0 <= j < tau]
    if bad:
        raise QkvError(f"head {bad[0]} does not exist: heads are numbered 0..{tau - 1}")
    return list(dict.fromkeys(heads))


def _shown(fig):
    """Let the figure show itself in a notebook as a PNG, without pyplot (and without drawing it twice)."""
    import io

    def png() -> bytes:
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=fig.dpi)
        return buf.getvalue()

    fig._repr_png_ = png
    return fig


@owning_float_errors
def heatmap(x: Any, tokens: Sequence[str] | None = None, *, layer: int | Sequence[int] | None = None,
            heads: int | Sequence[int] | None = None, scale: str = "linear", key_tokens: Sequence[str] | None = None,
            masked: Any = None, title: str | None = None, subtitle: str | None = None, dpi: int = 110,
            cmap: str = "viridis", annotate: bool = False) -> Figure:  # fmt: skip
    """The heatmaps ``qkv heatmap`` draws, as a matplotlib ``Figure`` (nothing is written; ``fig.savefig(path)``).

    Parameters
    ----------
    x : a result of ``qkv.run`` / ``generate`` / ``attribute``, or raw weights: (m, n), (tau, m, n) or
        (1, tau, m, n) (e.g. a TransformerLens ``cache["pattern", 0]``).
    tokens : raw weights only: the m query labels (default their positions); ``key_tokens`` the n key labels
        (default ``tokens`` when n == m).
    layer : a checkpoint run: that layer's heads; a list of layers: a layer x head grid; default every layer x
        head as one mosaic. A generation: the layer whose rows are drawn.
    heads : the heads to draw (default all).
    scale : "linear", "sqrt" or "log" colours.
    masked : raw weights only: (m, n) bool, True where a key was removed (drawn as masked).
    title, subtitle : instead of qkv's ("" for none); dpi : the Figure's dots per inch; cmap : a perceptually
        uniform colour map (viridis, magma, inferno, plasma, cividis, or NAME_r); annotate : print each weight
        in its cell (panels of at most 24 x 24), as ``qkv heatmap --title --subtitle --dpi --cmap --annotate``.
    """
    from qkv_cli.views.figures.heatmaps import SCALES
    from qkv_cli.views.figures.style import FigureStyle, styled

    if scale not in SCALES:
        raise QkvError(f"unknown scale {scale!r}: choose one of {', '.join(SCALES)}")
    look = FigureStyle(title=title, subtitle=subtitle, dpi=dpi, cmap=cmap, annotate=bool(annotate))
    if _is_result(x):
        if tokens is not None or key_tokens is not None or masked is not None:
            raise QkvError("tokens, key_tokens and masked are for raw weights: a result has its own")
        return figure(*_of_result(x, layer, heads), scale, look)
    if layer is not None:
        raise QkvError("layer is for a checkpoint's result: raw weights are one layer")
    with styled(look):
        return _shown(_of_arrays(x, tokens, key_tokens, heads, scale, masked))


def _is_result(x) -> bool:  # an api.results.Output (not imported here: results imports this module)
    return hasattr(x, "result") and isinstance(getattr(x, "kind", None), str)


def figure(result: Result, heads: list[int], layer: int | None, scale: str, look: FigureStyle) -> Figure:
    """The heatmap of a pipeline Result whose heads and layer are checked, drawn in ``look`` (a views.figures.style
    FigureStyle): what ``heatmap`` returns and ``qkv heatmap`` saves."""
    from qkv_cli.views.figures.style import styled
    from qkv_cli.views.kinds import heatmap_figure

    with styled(look):
        return _shown(heatmap_figure(result, heads, layer, scale))


def _of_result(x, layer, heads):
    """(the Result to draw, its checked heads, the layer given or None) for heatmap's keywords."""
    from dataclasses import replace

    from qkv_cli.core.result import Kind

    r = x.result
    at = None
    if x.kind == "model" and layer is not None:
        chosen = [layer] if isinstance(layer, int) else list(layer)
        if not chosen:
            raise QkvError("layer must name at least one layer")
        layers = {x.layer(l).layer_index: x.layer(l).result for l in chosen}
        r, at = replace(r, layers=layers), next(iter(layers))
    elif layer is not None:
        if r.kind != Kind.GENERATION or not isinstance(layer, int):
            raise QkvError("layer is for a checkpoint run (one or several) or a generation (one)")
        from qkv_cli.models import check_layer

        at = check_layer(layer, r.step_attentions.shape[1])
    chosen_heads = _heads(heads, r.heads_drawn)
    if r.kind == Kind.ATTRIBUTION:
        from qkv_cli.pipeline.attribution import attributed_heads

        chosen_heads = attributed_heads(r.method, None if heads is None else chosen_heads, chosen_heads)
    if r.kind == Kind.BATCH:
        raise QkvError("a batch has one figure per sentence: heatmap each of result.items")
    return r, chosen_heads, at


def _of_arrays(x, tokens, key_tokens, heads, scale, masked):
    import numpy as np

    from qkv_cli.views.figures.heatmaps import draw_grid

    w = np.asarray(x)
    if w.ndim == 4 and w.shape[0] == 1:
        w = w[0]
    if w.ndim == 2:
        w = w[None]
    if w.ndim != 3 or 0 in w.shape:
        raise QkvError(f"weights must be (m, n), (tau, m, n) or (1, tau, m, n), got shape {np.shape(x)}")
    if not np.issubdtype(w.dtype, np.number) or np.iscomplexobj(w):
        raise QkvError(f"weights must be real numbers, got {w.dtype}")
    w = w.astype(np.float64)
    if not np.isfinite(w).all():
        raise QkvError("weights hold NaN or infinity: a heatmap needs finite numbers")
    tau, m, n = w.shape
    rows = [str(i) for i in range(m)] if tokens is None else [str(t) for t in tokens]
    cols = (rows if n == m else [str(i) for i in range(n)]) if key_tokens is None else [str(t) for t in key_tokens]
    if len(rows) != m or len(cols) != n:
        raise QkvError(f"{len(rows)} tokens and {len(cols)} key tokens for weights of {m} queries x {n} keys")
    removed = np.zeros((m, n), dtype=bool) if masked is None else np.asarray(masked, dtype=bool)
    if removed.shape != (m, n):
        raise QkvError(f"masked must be (m, n) = ({m}, {n}), got {removed.shape}")
    chosen = _heads(heads, tau)
    panels = [(f"head {j}" if len(chosen) > 1 else "", w[j], removed) for j in chosen]
    shown = f"head {chosen[0]}" if len(chosen) == 1 else f"{len(chosen)} heads"
    return draw_grid(panels, rows, cols, f"Attention weights: {shown}", "", scale)


class Page:
    """The offline page ``qkv view`` writes: ``.html`` (the whole page), ``.save(path)``, and inline display in
    a notebook (an iframe whose ``srcdoc`` holds the page, so its script and styles stay contained)."""

    def __init__(self, html: str, holds: str = ""):
        self.html = html
        self.holds = holds  # what the page holds, in words: "6 layers x 12 heads x 9 x 9, 12-bit weights"

    def save(self, path: str | PathLike, max_page_size: int | str | None = None) -> str:
        """Write the page atomically (.html or .htm), refusing one above ``max_page_size`` (bytes or a size such as
        "200MB"; default 100 MB, as ``qkv view --max-page-size``); returns the path."""
        from qkv_cli.api.arguments import size_of
        from qkv_cli.views.page.html import MAX_PAGE, check_page_path, write_page

        check_page_path(path)
        limit = size_of(max_page_size, "max_page_size")
        write_page(self.html, self.holds, path, MAX_PAGE if limit is None else limit, "max_page_size")
        return str(path)

    def _repr_html_(self) -> str:
        import html

        return (
            '<iframe class="qkv-page" sandbox="allow-scripts" style="width: 100%; height: 760px; border: 0" '
            f'srcdoc="{html.escape(self.html, quote=True)}"></iframe>'
        )

    def __repr__(self) -> str:
        return f"<qkv page: {len(self.html.encode('utf-8'))} bytes>"


@owning_float_errors
def page(x: Any, *, layer: int | None = None) -> Page:
    """The interactive offline page of a result (head view, model view, matrix view), as ``qkv view`` writes it.

    ``layer``: a generation's layer shown first (default the last)."""
    from qkv_cli.views.kinds import rendered

    if not _is_result(x):
        raise QkvError(f"page takes a result of qkv.run, generate or attribute, got {type(x).__name__}")
    options = {}
    if x.kind == "generation" and x._model is not None:
        from qkv_cli.models import check_layer

        c = x._model.config
        L = x._model.decoder_shape[0]  # an encoder-decoder writes with its decoder
        options = {"kv_heads": c.G, "layer": None if layer is None else check_layer(layer, L)}
    elif layer is not None:
        raise QkvError("layer is for a generation's page: a run's page shows every layer it kept")
    return Page(*rendered(x.result, **options))


@owning_float_errors
def heads(x: Any, *, measure: str = "mul", exclude_first: bool = False,
          exclude_current: bool = False, layer: int | Sequence[int] | None = None) -> list[dict]:  # fmt: skip
    """The head roles ``qkv heads`` prints, as rows: one dict per layer and head (``layer``, ``head``, the
    statistics: entropy, max_weight, mean_distance, self, previous, first, local, next, sink, the detector scores
    previous_token, duplicate_token, induction; and ``role``). ``x``: a result or a list of them (one per
    sentence, aggregated)."""
    from qkv_cli.core.detectors import MEASURES
    from qkv_cli.views.console.heads import role_stats

    items = list(x) if isinstance(x, list | tuple) else [x]
    if not items or not all(_is_result(i) and i.kind in ("layer", "model") for i in items):
        raise QkvError("heads takes results of qkv.run (a Layer or a ModelRun), or a list of them")
    if measure not in MEASURES:
        raise QkvError(f"unknown measure {measure!r}: choose one of {', '.join(MEASURES)}")
    layers = () if layer is None else ((layer,) if isinstance(layer, int) else tuple(layer))
    options = {"measure": measure, "exclude_first": bool(exclude_first), "exclude_current": bool(exclude_current)}
    stats, _ = role_stats([i.result for i in items], options, layers)
    return [{k: v if isinstance(v, int | str) else float(v) for k, v in s.items()} for row in stats for s in row]
