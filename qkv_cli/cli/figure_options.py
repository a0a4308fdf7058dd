"""The options that make a figure slide-ready (qkv heatmap): title, subtitle, dpi, colour map, printed weights."""

from __future__ import annotations

from typing import Annotated

import typer

from qkv_cli.cli.options import choices
from qkv_cli.views.figures.style import COLORMAPS, DPI, MAX_ANNOTATED

Colormap = choices("Colormap", COLORMAPS)
TitleOpt = Annotated[
    str | None, typer.Option("--title", metavar="TEXT", help="The figure's title instead of qkv's ('' for none).")
]
SubtitleOpt = Annotated[
    str | None,
    typer.Option("--subtitle", metavar="TEXT", help="The line under the title instead of qkv's (model, layer, "
                 "heads, mask in words); '' or --no-subtitle for none. The settings stay in the file's metadata."),
]  # fmt: skip
NoSubtitleOpt = Annotated[bool, typer.Option("--no-subtitle", help="Draw no subtitle.")]
DpiOpt = Annotated[int, typer.Option("--dpi", help=f"Dots per inch of a PNG, {DPI[0]}..{DPI[1]} (slides: 150-300).")]
CmapOpt = Annotated[
    Colormap,
    typer.Option("--cmap", help="Colour map, perceptually uniform only (equal steps in weight look equal; "
                 "readable in grey); NAME_r reverses it."),
]  # fmt: skip
AnnotateOpt = Annotated[
    bool,
    typer.Option("--annotate", help=f"Print each weight in its cell (panels of at most {MAX_ANNOTATED} x "
                 f"{MAX_ANNOTATED} tokens; needs --layer with --model)."),
]  # fmt: skip


def figure_style(title, subtitle, no_subtitle: bool, dpi: int, cmap, annotate: bool):
    """The options as one checked views.figures.style.FigureStyle."""
    from qkv_cli.errors import QkvError
    from qkv_cli.views.figures.style import FigureStyle

    if no_subtitle and subtitle:
        raise QkvError("--no-subtitle and --subtitle TEXT contradict each other: give one")
    subtitle = "" if no_subtitle else subtitle
    return FigureStyle(title=title, subtitle=subtitle, dpi=dpi, cmap=getattr(cmap, "value", cmap), annotate=annotate)
