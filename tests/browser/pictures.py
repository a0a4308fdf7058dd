"""Screenshots of the browser tests: is one blank, how many pixels two differ in."""

from __future__ import annotations

import io

import numpy as np


def blank(png: bytes) -> bool:
    from PIL import Image

    img = np.asarray(Image.open(io.BytesIO(png)).convert("RGB")).reshape(-1, 3)
    background = np.median(img, axis=0)
    busy = (np.abs(img - background).sum(axis=1) > 30).mean()
    return busy < 0.02 or len(np.unique(img, axis=0)) < 20


def changed(a: bytes, b: bytes) -> int:
    """How many pixels two screenshots differ in, beyond anti-aliasing noise (a sum of 24 over the channels)."""
    from PIL import Image

    x, y = (np.asarray(Image.open(io.BytesIO(p)).convert("RGB")).astype(int) for p in (a, b))
    return x.size if x.shape != y.shape else int((np.abs(x - y).sum(-1) > 24).sum())
