"""The page's per-head summary: the statistics and roles `qkv heads` computes (core.roles), per layer and head.

Self-attention gets every column of `qkv heads` and a role; cross-attention (keys from another text), a long
document's band and a generation (one row per written token) get the numbers that still mean something there, and
no role (roles need positions of one text, and the full m x m weights).
"""

from __future__ import annotations

import math

import numpy as np

from qkv_cli.core.roles import LOCAL_RADIUS, THRESHOLDS, layer_head_stats
from qkv_cli.core.stats import band_summary, head_summary, row_entropy

CROSS_COLUMNS = (("entropy", "entropy"), ("max_weight", "max w"))
BAND_COLUMNS = (("entropy", "entropy"), ("max_weight", "max w"), ("mean_distance", "dist"), ("self_share", "self"))
GENERATION_COLUMNS = (("entropy", "entropy"), ("max_weight", "max w"), ("mean_distance", "dist"),
                      ("first_share", "first"), ("prompt_share", "prompt"))  # fmt: skip


def _number(x):
    x = float(x)
    return round(x, 4) if math.isfinite(x) else None


def _table(grid, columns, roles: bool, note: str) -> dict:
    """grid[layer][head]: a dict of statistics -> {"columns", "rows" [layer][head][column], "roles", "note"}."""
    return {
        "columns": [list(c) for c in columns],
        "rows": [[[_number(s.get(key, math.nan)) for key, _ in columns] for s in row] for row in grid],
        "roles": [[_role(s) for s in row] for row in grid] if roles else None,
        "note": note,
    }


def _role(stats: dict) -> str:
    """The role, as `qkv heads` prints it (a sink names its token; html_data.sentence cleans the label)."""
    sink = stats.get("sink_token")
    return stats["role"] + (f" ({sink})" if stats["role"] == "sink" and sink else "")


def _roles(weights_list, allowed_list, tokens, labels) -> dict:
    """`qkv heads`'s statistics, columns and notes, with its default detector options."""
    from qkv_cli.views.console import heads

    grid = layer_head_stats(weights_list, allowed_list, tokens_list=tokens, labels_list=labels)
    columns = list(heads.COLUMNS) + list(getattr(heads, "DETECTOR_COLUMNS", []))
    note = heads.THRESHOLDS_TEXT.format(**THRESHOLDS, r=LOCAL_RADIUS)
    if hasattr(heads, "DETECTORS_TEXT"):
        options = {"measure": "mul", "exclude_first": False, "exclude_current": False}
        note += " " + heads.DETECTORS_TEXT.format(**THRESHOLDS, how=heads.detector_options(options))
    return _table(grid, columns, True, note)


def role_short() -> dict:
    """The short role names of `qkv heads`' layer x head grid, for the model view's thumbnails."""
    from qkv_cli.views.console.heads import ROLE_SHORT

    return dict(ROLE_SHORT)


def layer_stats(r) -> dict:
    """One attention layer (SEEDED or LAYER), as `qkv heads` computes it; cross-attention: entropy and peak only."""
    if r.is_cross:
        rows = head_summary(r.weights, live_rows=~r.empty_rows, cross=True)
        return _table([rows], CROSS_COLUMNS, False, "cross-attention: keys come from the context, so distance, "
                      "self, previous and first token (and the roles built on them) do not apply")  # fmt: skip
    tokens = r.tokens.strings if r.tokens.ids is None else r.tokens.ids
    return _roles([r.weights[None]], [~r.masked], [tokens], [r.labels])


def model_stats(run) -> dict:
    """Every layer and head of a checkpoint run, as `qkv heads --model` computes it."""
    return _roles([run.attentions], None, [run.ids], [run.labels])


def band_stats(r) -> dict:
    rows = band_summary(r.band, range(r.band.shape[0]))
    return _table([rows], BAND_COLUMNS, False, "a band run keeps only the window (tau x m x n_c): distance and self "
                  "are over the window; roles need the full m x m weights")  # fmt: skip


def generation_stats(gen, masked) -> dict:
    """Per layer and head, the mean over the written tokens of: entropy, peak, distance back from the writing query
    (position P + t - 1), the weight on the first token and the weight on the prompt (keys 0 .. P - 1)."""
    w = np.asarray(gen.step_attentions, dtype=np.float64).transpose(1, 2, 0, 3)  # -> (L, tau, steps, n)
    if gen.context is not None:  # an encoder-decoder: the rows are cross-attention over the source
        grid = [head_summary(layer, cross=True) for layer in w]
        return _table(grid, CROSS_COLUMNS, False, "an encoder-decoder writing: each row is a written token's "
                      "cross-attention over the source; positions of one text (and roles) do not apply")  # fmt: skip
    P, (steps, n) = gen.prompt_len, masked.shape
    back = np.where(masked, 0, P + np.arange(steps)[:, None] - 1 - np.arange(n)[None, :])  # (steps, n)
    columns = {"entropy": row_entropy(w), "max_weight": w.max(axis=-1), "mean_distance": (w * back).sum(axis=-1),
               "first_share": w[..., 0], "prompt_share": w[..., :P].sum(axis=-1)}  # fmt: skip
    means = {key: value.mean(axis=-1) for key, value in columns.items()}  # (L, tau) each
    grid = [[{key: v[l, h] for key, v in means.items()} for h in range(w.shape[1])] for l in range(w.shape[0])]
    return _table(grid, GENERATION_COLUMNS, False, "a generation: each row is the query that wrote a token, over "
                  "every token before it; dist counts back from that query, prompt is the weight on the prompt's "
                  f"{P} tokens; roles need the full m x m weights")  # fmt: skip
