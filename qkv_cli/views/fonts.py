"""Labels in any script: a font list that has the glyphs where the machine has one, code points where it has none.

matplotlib falls back from one font family to the next for a missing glyph (3.6+). qkv lists DejaVu Sans, then
the Noto and other wide-coverage families that are installed (never one that is not: that is a warning per
label); a character none of them has is drawn as `U+6211`, and the run says so once, on stderr.
"""

from __future__ import annotations

import functools
import logging
import os
import sys
import tempfile

FALLBACK = ("DejaVu Sans", "Noto Sans", "Noto Sans CJK SC", "Noto Sans CJK JP", "Noto Sans CJK KR", "Noto Sans SC",
            "Noto Sans JP", "WenQuanYi Zen Hei", "Droid Sans Fallback", "Noto Color Emoji", "Noto Emoji", "Symbola",
            "Arial Unicode MS")  # fmt: skip
_told = []


def quiet_matplotlib() -> None:
    """Before matplotlib is imported: a writable config folder (an unwritable or missing HOME would make it print
    two lines), and its font warnings silenced."""
    folder = os.environ.get("MPLCONFIGDIR") or os.path.join(os.path.expanduser("~"), ".config", "matplotlib")
    if not _writable(folder):
        os.environ["MPLCONFIGDIR"] = tempfile.mkdtemp(prefix="qkv-mpl-")
    for name in ("matplotlib", "matplotlib.font_manager", "matplotlib.texmanager"):
        logging.getLogger(name).setLevel(logging.ERROR)


def _writable(folder: str) -> bool:
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError:
        return False
    return os.access(folder, os.W_OK)


@functools.cache
def families() -> tuple[str, ...]:
    """The fallback families installed on this machine, in order (DejaVu Sans ships with matplotlib)."""
    from matplotlib import font_manager

    installed = {f.name for f in font_manager.fontManager.ttflist}
    return tuple(name for name in FALLBACK if name in installed) or ("DejaVu Sans",)


@functools.cache
def covered() -> frozenset[int]:
    """Every code point one of families() can draw."""
    from matplotlib import font_manager
    from matplotlib.ft2font import FT2Font

    points: set[int] = set()
    for name in families():
        try:
            path = font_manager.findfont(font_manager.FontProperties(family=name), fallback_to_default=False)
            points.update(FT2Font(path).get_charmap())
        except (ValueError, RuntimeError, OSError):
            continue
    return frozenset(points)


def drawable(label: str) -> str:
    """The label with each character no installed font can draw written as U+XXXX."""
    have = covered()
    if all(ord(c) in have or c.isspace() for c in label):
        return label
    _told.append(True)
    return "".join(c if ord(c) in have or c.isspace() else f"U+{ord(c):04X}" for c in label)


def tell() -> None:
    """One line on stderr if any label lost glyphs (at most once per run)."""
    if _told and _told[0] is not None:
        sys.stderr.write("qkv: note: no installed font has some characters of the labels; they are drawn as U+XXXX "
                         "codes (install e.g. fonts-noto-cjk or fonts-noto-color-emoji)\n")  # fmt: skip
        _told[:] = [None]
