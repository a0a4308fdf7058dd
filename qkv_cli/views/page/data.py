"""What the page of `qkv view` stores, packed compactly; qkv_cli/views/page/data.js decodes it.

- Weights alpha in [0, 1]: 12-bit fixed point q = round(4095 alpha), two weights in three bytes (|error| <= 1/8190).
- Where a layer kept its scores S (the run's detail layers), S is stored instead of alpha: float16 of S_it minus
  the row's max over the allowed keys, plus that max per row in float32. The page computes
  alpha = Softmax(S + Mask) row by row from them, so one stored number per cell gives both the score and the
  weight. The reconstruction is checked here against the computed weights; a layer that misses by more than
  TOLERANCE stores its 12-bit weights as well (the page then shows those).
- A large page (more than COMPACT_CELLS stored cells, e.g. a checkpoint on hundreds of tokens) is compact: a layer
  without scores stores its weights as 8 bits of the row's largest, q = round(255 alpha / max_row), with each
  row's max in float32, and q < CUT (under 1% of the row's largest: no colour, no line) stored as 0; its scores
  (detail layers) stay float16 as above, with the cells the mask removes stored as 0 ("maskedScores": false: the
  page shows no score there). Every compact binary field is zlib-deflated, written "z:" + base64, and
  the page inflates it (DecompressionStream) before it draws: the zeros and the masked cells then cost almost
  nothing.
- Attention sinks (gpt-oss): a layer's "sink" holds each row's sink share (1 - row sum) as float32 (tau, m); its
  weights are stored beside its scores (Softmax(S + Mask) without the sink would miss the reconstruction check).
- Masks: one bit per cell (1 = removed, -inf), each distinct grid stored once.
- A generation (generation_sentence): one layer entry per layer, 12-bit weights (tau, steps, n_max): row t is the
  query that wrote token prompt_len + t; keys prompt_len + t and after are masked (step t had not read them).
- An attribution (attribution_sentence): the layer as a dense sentence, plus "attribution": {"f": the m x n values
  as float32, "mask": one bit per cell, removed by the layer's mask and exactly 0}.
- Everything binary is base64, little-endian. Labels are text from files: control characters are stripped here,
  and the page puts them into the document as text only (never as markup).
"""

from __future__ import annotations

import base64
import re

import numpy as np

LEVELS = 4095  # 12-bit fixed point
TOLERANCE = 5e-4  # the largest |Softmax(stored S + Mask) - alpha| accepted before the weights are stored too
F16_MAX = 65504.0
COMPACT_CELLS = 4_194_304  # above this many stored weights a page is compact: 8-bit row shares, deflated
Q8 = 255  # compact weights: q = round(255 alpha / max_row)
CUT = 3  # compact weights with q < CUT (alpha under 1% of its row's largest) are stored as 0
F32_MAX = float(np.finfo(np.float32).max)
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def label(text) -> str:
    """A label as the page shows it: control characters (escape sequences, NUL, newlines) removed."""
    text = _CONTROL.sub("", str(text))
    return text if text.strip() else "\ufffd"


def b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii")


def deflated(raw: bytes) -> str:
    """A compact page's binary field: "z:" + base64 of the zlib stream (the page inflates it)."""
    import zlib

    return "z:" + b64(zlib.compress(raw, 6))


def pack8(weights) -> dict:  # [tau, m, n] in [0, 1] -> {"q8": deflated 8-bit row shares, "rmax": float32 row maxima}
    w = np.asarray(weights, dtype=np.float64)
    top = w.max(axis=-1, initial=0.0)
    q = np.rint(w / np.where(top > 0, top, 1.0)[..., None] * Q8)
    q = np.where(q < CUT, 0, q).astype(np.uint8)
    return {"q8": deflated(q.tobytes()), "rmax": b64(top.astype("<f4").tobytes())}


def pack12(weights) -> str:  # [...] in [0, 1] -> base64 of q = round(4095 w), 3 bytes per pair, row-major
    q = np.rint(np.clip(np.asarray(weights, dtype=np.float64).ravel(), 0.0, 1.0) * LEVELS).astype(np.uint16)
    if q.size % 2:
        q = np.append(q, np.uint16(0))
    a, b = q[0::2], q[1::2]
    out = np.empty((a.size, 3), dtype=np.uint8)
    out[:, 0] = a >> 4
    out[:, 1] = ((a & 15) << 4) | (b >> 8)
    out[:, 2] = b & 255
    return b64(out.tobytes())


def bits(masked) -> str:  # [m, n] bool -> base64 of one bit per cell, row-major, least significant bit first
    return b64(np.packbits(np.asarray(masked, dtype=bool).ravel(), bitorder="little").tobytes())


def relative_scores(scores, masked):  # [tau, m, n], [m, n] -> S - row max (float16), row max [tau, m] (float32)
    """Each row relative to its largest allowed score (a row with every key masked: to its largest score).
    None where a finite score would not survive the storage: a row max beyond float32's range (about 3.4e38, which
    float32 would store as inf) or an allowed score further than float16's 65504 below its row max."""
    S = np.asarray(scores, dtype=np.float64)
    allowed = np.where(masked[None], -np.inf, S)
    top = allowed.max(axis=-1)
    top = np.where(np.isfinite(top), top, S.max(axis=-1))
    gap = np.where(masked[None], 0.0, S - top[..., None])
    if not (np.all(np.abs(top[np.isfinite(top)]) <= F32_MAX) and np.all(np.abs(gap[np.isfinite(gap)]) <= F16_MAX)):
        return None
    rel = np.clip(S - top[..., None], -F16_MAX, F16_MAX).astype(np.float16)
    return rel, top.astype(np.float32)


def softmax_rows(rel, masked):  # [tau, m, n] float16 S - max, [m, n] -> what the page computes: Softmax(S + Mask)
    x = np.where(masked[None], -np.inf, rel.astype(np.float64))  # allowed cells are <= 0: exp never overflows
    e = np.exp(x)
    total = e.sum(axis=-1, keepdims=True)
    return np.divide(e, total, out=np.zeros_like(e), where=total > 0)


def with_sinks(entry: dict, sinks) -> dict:  # a layer entry, [tau, m] or None -> the entry with "sink"
    if sinks is not None:
        entry["sink"] = b64(np.asarray(sinks, dtype="<f4").tobytes())
    return entry


def layer(weights, scores=None, masked=None, compact: bool = False) -> dict:
    """One layer of tau heads: {"w"}, 12-bit weights; or {"s", "top"}, scores the page turns into weights.
    compact: {"q8", "rmax"} instead of {"w"}, and the scores deflated. A layer whose scores the storage cannot
    hold (relative_scores gives None) keeps its weights only: the page then shows no scores for it rather than
    wrong ones."""
    entry = {}
    stored = None if scores is None else relative_scores(scores, masked)
    if stored is not None:
        rel, top = stored
        if compact:  # the scores of removed cells are not shown on a compact page: 0, so they cost nothing
            rel = np.where(masked[None], np.float16(0), rel)
        raw = rel.astype("<f2").tobytes()
        entry = {"s": deflated(raw) if compact else b64(raw), "top": b64(top.astype("<f4").tobytes())}
        if compact:
            entry["maskedScores"] = False
        if np.abs(softmax_rows(rel, masked) - np.asarray(weights, dtype=np.float64)).max(initial=0.0) <= TOLERANCE:
            return entry
    elif scores is not None:
        entry["beyond"] = True  # the page says that this layer's scores were too large to store
    if compact:
        return {**entry, **pack8(weights)}
    entry["w"] = pack12(weights)
    return entry


def sentence(name, queries, keys, layers, masks, stats) -> dict:
    """One sentence of the page: its labels, one entry per layer, its masks (masks[l]: the grid of layer l)."""
    grids, index = [], []
    for grid in masks:
        packed = bits(grid)
        if packed not in grids:
            grids.append(packed)
        index.append(grids.index(packed))
    if stats.get("roles"):
        stats["roles"] = [[label(r) for r in row] for row in stats["roles"]]
    return {"name": label(name[:160]), "tokens": [label(t) for t in queries], "keys": [label(t) for t in keys],
            "layers": layers, "masks": grids, "maskOf": index, "stats": stats}  # fmt: skip


def dense_sentence(r, name: str = "") -> dict:
    """A SEEDED (or LAYER) Result: one layer, its scores kept (the page derives the weights from them)."""
    from qkv_cli.views.page.stats import layer_stats

    masked = r.masked
    entry = with_sinks(layer(r.weights, r.scores, masked), r.sinks)
    return sentence(name or " ".join(r.labels), r.labels, r.key_labels, [entry], [masked], layer_stats(r))


def model_sentence(run) -> dict:
    """A MODEL Result: every layer's weights; scores where the run kept a layer in detail."""
    from qkv_cli.views.page.stats import model_stats

    L, compact = run.attentions.shape[0], run.attentions.size > COMPACT_CELLS
    masks = [run.layers[l].masked if l in run.layers else run.layer_masked(l) for l in range(L)]
    layers = [layer(run.attentions[l], run.layers[l].scores if l in run.layers else None, masks[l], compact)
              for l in range(L)]  # fmt: skip
    if run.sinks is not None:
        layers = [with_sinks(entry, run.sinks[l]) for l, entry in enumerate(layers)]
    return sentence(" ".join(run.labels), run.labels, run.labels, layers, masks, model_stats(run))


def band_sentence(r) -> dict:
    """A BAND Result: weights_band[j, i, t] (query i on key i - n_c + 1 + t), 12-bit; no scores, no grid."""
    from qkv_cli.views.page.stats import band_stats

    entry = pack8(r.band) if r.band.size > COMPACT_CELLS else {"w": pack12(r.band)}
    return sentence(" ".join(r.labels[:12]), r.labels, r.labels, [entry], [], band_stats(r))


def generation_sentence(gen) -> dict:
    """A GENERATION Result: queries are the written tokens (row t wrote token P + t, read by the query at P + t - 1),
    keys every token (n_max); 12-bit weights per layer, no scores; keys P + t and later are masked in row t."""
    from qkv_cli.views.page.stats import generation_stats

    P, (steps, L, _, n) = gen.prompt_len, gen.step_attentions.shape
    cross = gen.context is not None  # an encoder-decoder wrote: each step's cross-attention over the n source tokens
    masked = np.zeros((steps, n), bool) if cross else generation_masked(P, steps, n)
    pack = pack8 if gen.step_attentions.size > COMPACT_CELLS else (lambda w: {"w": pack12(w)})
    layers = [pack(gen.step_attentions[:, l].transpose(1, 0, 2)) for l in range(L)]  # (tau, steps, n)
    written, keys = gen.labels[P : P + steps], list(gen.context.labels) if cross else gen.labels[:n]
    before = keys if cross else gen.labels[:P]
    out = sentence(" ".join(before) + " \u2192 " + " ".join(written), written, keys, layers, [masked] * L,
                   generation_stats(gen, masked))  # fmt: skip
    out["queryNotes"] = [label(f"step {t}: wrote it with p = {gen.step_probs[t]:.4f}; its row is the cross-attention "
                               "over the source" if cross else f"step {t}: wrote position {P + t} with p = "
                               f"{gen.step_probs[t]:.4f}, read by the query at position {P + t - 1}")
                         for t in range(steps)]  # fmt: skip
    return out


def generation_masked(P: int, steps: int, n: int):  # -> [steps, n] bool: step t read keys 0 .. P + t - 1 only
    return np.arange(n)[None, :] >= P + np.arange(steps)[:, None]


def attribution_sentence(r) -> dict:
    """An ATTRIBUTION Result: its layer (raw weights and scores, as dense_sentence) and the attribution (m, n)."""
    out = dense_sentence(r)
    values = np.asarray(r.attribution, dtype=np.float64)
    out["attribution"] = {"f": b64(values.astype("<f4").tobytes()), "mask": bits(r.masked & (values == 0))}
    return out
