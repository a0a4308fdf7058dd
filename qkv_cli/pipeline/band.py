"""Long documents under a sliding window: only the band (tau, m, n_c) is computed, never an m x m array.

Query i sees the n_c most recent keys V_[i-n_c+1, i]; the band holds exactly those weights:
band[j, i, t] = weight of head j's query i on key i - n_c + 1 + t (t = n_c - 1 is the query itself; slots before
position 0 hold 0 and have key -1 in `band_keys`). See core.band for the kernel.
"""

from __future__ import annotations

import numpy as np

from qkv_cli.core import budget
from qkv_cli.core.band import band_keys, banded_attention
from qkv_cli.core.embed import embed
from qkv_cli.core.kernels import resolve_scale
from qkv_cli.core.projection import combine, init_projections, project
from qkv_cli.core.result import BandResult, Result
from qkv_cli.core.settings import Settings

BAND_MIN_TOKENS = 1024  # from this many tokens on, a --window run keeps only the band
HINTS = "--dtype float32, a smaller --window, fewer heads (--tau), a smaller --d, or a shorter text"


def estimate(m: int, settings: Settings) -> int:
    itemsize = 4 if settings.dtype == "float32" else 8
    return budget.attention_bytes(m, m, settings.d, settings.tau, itemsize, band=settings.window)


def run(text: str, settings: Settings, max_memory: int | None = None, output=None) -> Result:
    """A BAND Result for long texts; shorter ones go through the seeded pipeline (a SEEDED Result). output:
    core.output_size.Output, the JSON or CSV to print: refused above its limit before anything runs."""
    from qkv_cli.pipeline import seeded
    from qkv_cli.pipeline.output_plan import check_band
    from qkv_cli.text.tokens import tokenize

    limit = budget.default_max_memory() if max_memory is None else max_memory
    budget.check_text(text, lambda t: len(tokenize(t, settings.tokenizer)), lambda k: estimate(k, settings), limit,
                      HINTS, settings.dtype)  # fmt: skip
    tokens = tokenize(text, settings.tokenizer)
    m = len(tokens)
    if m < BAND_MIN_TOKENS:
        return seeded.run(text, settings, tokens=tokens, max_memory=max_memory, output=output)
    budget.check_budget(estimate(m, settings), limit, HINTS, dtype=settings.dtype)
    check_band(output, settings, tokens, min(settings.window, m))
    dtype = np.dtype(settings.dtype)
    H = embed(list(tokens.strings), settings.d, settings.seed, settings.positions, dtype)
    Wq, Wk, Wv, Wo = init_projections(settings.d, settings.tau, settings.seed, settings.projection, dtype,
                                      kv_heads=settings.kv_heads)  # fmt: skip
    Q, K, V = project(H, Wq), project(H, Wk), project(H, Wv)
    scale = resolve_scale(settings.scale, settings.d_k)
    heads, band = banded_attention(Q, K, V, settings.window, scale)
    return BandResult(tokens=tokens, settings=settings, scale=scale, kernel="banded", H=H, Wq=Wq,
                  Wk=Wk, Wv=Wv, Q=Q, K=K, V=V, band=band, band_keys=band_keys(m, band.shape[-1]), heads=heads, Wo=Wo,
                  output=combine(heads, Wo))  # fmt: skip
