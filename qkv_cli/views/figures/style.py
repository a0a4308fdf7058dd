"""How a figure looks on a slide: its title and subtitle, resolution, colour map and printed weights.

One checked FigureStyle per drawing, set around it with `styled(style)`: the drawing functions read `current()`,
so a new option is one field here, not a parameter threaded through every kind of heatmap.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

from qkv_cli.errors import QkvError

# matplotlib's perceptually uniform sequential maps (equal steps in weight look like equal steps in colour, and
# they print readably in grey); each also reversed. Rainbow maps such as jet invent edges, so they are refused.
PERCEPTUAL = ("viridis", "magma", "inferno", "plasma", "cividis")
COLORMAPS = PERCEPTUAL + tuple(f"{name}_r" for name in PERCEPTUAL)
MAX_ANNOTATED = 24  # --annotate: at most this many queries and keys per panel (beyond, the numbers are unreadable)
DPI = (30, 1200)


@dataclass(frozen=True)
class FigureStyle:
    """title / subtitle: None keeps the figure's own, "" draws none; dpi: dots per inch of a PNG (and of the
    Figure); cmap: one of COLORMAPS; annotate: print each weight in its cell."""

    title: str | None = None
    subtitle: str | None = None
    dpi: int = 110
    cmap: str = "viridis"
    annotate: bool = False

    def __post_init__(self):
        if self.cmap not in COLORMAPS:
            raise QkvError(f"colour map {self.cmap!r} is not offered: choose a perceptually uniform one, "
                           f"{', '.join(PERCEPTUAL)} (or NAME_r, reversed)")  # fmt: skip
        if not isinstance(self.dpi, int) or not DPI[0] <= self.dpi <= DPI[1]:
            raise QkvError(f"dpi {self.dpi!r} is out of range: give {DPI[0]}..{DPI[1]} (slides: 150-300)")
        for name in ("title", "subtitle"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, str):
                raise QkvError(f"{name} must be text, got {type(value).__name__}")


_STYLES: list[FigureStyle] = []


def current() -> FigureStyle:
    """The style of the drawing under way (the default one outside `styled`)."""
    return _STYLES[-1] if _STYLES else FigureStyle()


@contextlib.contextmanager
def styled(style: FigureStyle | None):
    """Inside the block, every figure drawn takes `style` (None: the default)."""
    _STYLES.append(style or FigureStyle())
    try:
        yield
    finally:
        _STYLES.pop()


def check_annotate(m: int, n: int) -> None:
    """--annotate prints one number per cell: refuse panels too large for the numbers to be read."""
    if current().annotate and max(m, n) > MAX_ANNOTATED:
        most = f"{MAX_ANNOTATED} x {MAX_ANNOTATED}"
        raise QkvError(f"--annotate prints a weight in each cell, for panels of at most {most}; this one is "
                       f"{m} x {n}: use a shorter text or leave --annotate out")  # fmt: skip


def title_of(default: str) -> str:
    given = current().title
    return default if given is None else given


def subtitle_of(default: str) -> str:
    given = current().subtitle
    return default if given is None else given


def annotate(ax, weights, masked, box, image) -> None:
    """Each allowed cell's weight printed in it, dark on light colours and light on dark ones."""
    import numpy as np  # (the CLI imports this module for its option choices: start-up stays light)

    x0, y0, pw, ph = box
    m, n = weights.shape
    cell = min(pw / n, ph / m) * 72  # points
    size = max(3.0, min(9.0, cell / 2.6))
    rgba = image.to_rgba(np.ma.masked_array(weights, mask=masked))
    light = (0.299 * rgba[..., 0] + 0.587 * rgba[..., 1] + 0.114 * rgba[..., 2]) > 0.5
    for i in range(m):
        for t in range(n):
            if masked[i, t]:
                continue
            ax.text(x0 + (t + 0.5) * pw / n, y0 + ph - (i + 0.5) * ph / m, f"{weights[i, t]:.2f}".lstrip("0"),
                    ha="center", va="center", fontsize=size, color="black" if light[i, t] else "white",
                    parse_math=False)  # fmt: skip
