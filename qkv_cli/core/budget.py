"""Estimate the memory a run needs before spending it (no numpy: this runs before anything is allocated)."""

from __future__ import annotations

import os
import re

from qkv_cli.errors import QkvError, TooLargeError

UNITS = {
    "": 1,
    "b": 1,
    "k": 1e3,
    "kb": 1e3,
    "m": 1e6,
    "mb": 1e6,
    "g": 1e9,
    "gb": 1e9,
    "t": 1e12,
    "tb": 1e12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
}


def physical_memory() -> int:
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 8 * 2**30


def default_max_memory() -> int:
    """Half of this machine's RAM."""
    return physical_memory() // 2


def parse_size(text: str, option: str = "--max-memory") -> int:
    """'4GB', '500 MiB', '1e9' -> bytes (option: named in the error)."""
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*([a-zA-Z]*)\s*", str(text))
    unit = match.group(2).lower() if match else None
    if not match or unit not in UNITS:
        raise QkvError(f"{option} {text!r} is not a size: use e.g. 500MB, 4GB or 2GiB")
    size = float(match.group(1)) * UNITS[unit]
    if not 1 <= size < 2**63:
        raise QkvError(f"{option} {text!r} is {human(size)}: give at least 1 byte, e.g. 500MB, 4GB or 2GiB")
    return int(size)


def human(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB", "PB"):
        if abs(n) < 1000 or unit == "PB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n} B"


def attention_bytes(m: int, n: int, d: int, tau: int, itemsize: int, band: int | None = None) -> int:
    """Bytes for one layer as the pipeline keeps it: H, weights, Q/K/V, scores + weights + their temporary."""
    cols = n if band is None else min(band, n)
    per_head = 3 * m * cols  # scores, weights, one temporary of the same size
    matrices = 4 * d * d + 4 * m * d + 3 * n * d + m * cols  # W's; H, Q, heads, output; Y, K, V (n keys); mask
    draw = 8 * d * d  # the float64 Glorot draw behind W^o lives beside the finished matrices for a moment
    return (tau * per_head + matrices) * itemsize + draw


def check_budget(needed: int, max_memory: int, hints: str = "", at_least: bool = False, what: str = "this run",
                 dtype=None, given=()) -> None:  # fmt: skip
    """TooLargeError when `needed` bytes exceed the budget, with `hints` less those already followed: `given`
    (e.g. "fewer --layer" with one layer) and "--dtype float32" when `dtype` is already 4 bytes or fewer."""
    if needed > max_memory:
        hints = without(hints, (*given, *(["--dtype float32"] if dtype is not None and small(dtype) else [])))
        hint = f"; try {hints}" if hints else ""
        about = "at least" if at_least else "about"
        raise TooLargeError(f"{what} needs {about} {human(needed)}, more than --max-memory {human(max_memory)}{hint}")


def small(dtype) -> bool:
    import numpy as np

    return np.dtype(dtype).itemsize <= 4


def without(hints: str, drop) -> str:
    """ "a, b, or c" less the pieces in `drop`, rejoined the same way ("a or c"); unchanged when none is dropped."""
    pieces = [p for p in re.split(r",\s*or\s+|,\s*|\s+or\s+", hints) if p]
    kept = [p for p in pieces if p not in set(drop)]
    if len(kept) == len(pieces):
        return hints
    if len(kept) <= 2:
        return " or ".join(kept)
    return ", ".join(kept[:-1]) + ", or " + kept[-1]


PROBE_CHARS_PER_TOKEN = 16  # a prefix this many characters per allowed token nearly always holds more tokens


def check_text(text: str, count, needed, max_memory: int, hints: str = "", dtype=None) -> None:
    """Refuse a text far too long for the budget before tokenizing all of it (that alone can take minutes).

    count(str) -> number of tokens; needed(m) -> bytes for m tokens (increasing in m). The weights alone are
    checked first (m = 1); then a prefix of the text, cut at whitespace, is tokenized: its tokens are a lower
    bound on the whole text's, so if even they do not fit, the run is refused with that (lower) estimate.
    """
    check_budget(needed(1), max_memory, hints, dtype=dtype)
    lo, hi = 1, max(1, len(text))  # the largest m that fits lies in [lo, hi]
    if needed(hi) <= max_memory:
        return
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if needed(mid) <= max_memory else (lo, mid - 1)
    probe = PROBE_CHARS_PER_TOKEN * (lo + 1)
    if len(text) <= probe:
        return
    cut = max(text.rfind(" ", 0, probe), text.rfind("\n", 0, probe))
    m = count(text[: cut if cut > 0 else probe])
    if m > lo:
        check_budget(needed(m), max_memory, hints, at_least=True, dtype=dtype)
