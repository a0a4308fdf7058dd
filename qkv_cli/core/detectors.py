"""TransformerLens' head detectors: how closely a head's weights alpha (m x m) follow a detection pattern P.

The patterns (P[i, t] = 1 where the head "should" look; all lower-triangular, as TransformerLens builds them):

- previous_token: the sub-diagonal, P[i, i-1] = 1;
- duplicate_token: P[i, t] = 1 where tok_t == tok_i and t < i (an earlier copy of the query's own token);
- induction: the duplicate pattern shifted one key to the right, P[i, t] = 1 where tok_{t-1} == tok_i and
  t - 1 < i, t <= i (the token after an earlier copy of the query's token: what an induction head attends to).

The two measures of TransformerLens' `detect_head`:

- "mul" (the default): sum(alpha * P) / sum(alpha), the share of the head's weight on the pattern's cells;
- "abs": 1 - mean|alpha - P| * m, i.e. 1 - sum|alpha - P| / m: 1 = the pattern exactly, -1 = nothing alike.

exclude_first (TransformerLens' exclude_bos) zeroes the first key's column before scoring, exclude_current the
diagonal: in "mul" they leave alpha's total too, so weight on a BOS sink does not count against the head. Two
differences from TransformerLens, both on purpose: "abs" is not rounded to 3 decimals, and a bidirectional head's
weight above the diagonal is counted as error (TransformerLens asserts that it is zero). A head with no weight left
after the exclusions scores 0. Over several sentences the score is the mean over sentences (as TransformerLens).
NumPy only.
"""

from __future__ import annotations

import numpy as np

from qkv_cli.errors import QkvError

MEASURES = ("mul", "abs")
NAMES = ("previous_token", "duplicate_token", "induction")


def previous_token_pattern(m: int):  # -> [m, m] P[i, i-1] = 1
    return np.eye(m, k=-1)


def duplicate_token_pattern(tokens):  # [m] token ids (or strings) -> [m, m] P[i, t] = tok_i == tok_t, t < i
    tok = np.asarray(tokens)
    same = tok[:, None] == tok[None, :]
    return np.tril(same, k=-1).astype(np.float64)


def induction_pattern(tokens):  # [m] -> [m, m] P[i, t] = duplicate[i, t - 1], first column 0, lower-triangular
    dup = duplicate_token_pattern(tokens)
    shifted = np.zeros_like(dup)
    shifted[:, 1:] = dup[:, :-1]
    return np.tril(shifted)


def pattern(name: str, tokens):  # -> [m, m]
    if name == "previous_token":
        return previous_token_pattern(len(tokens))
    if name == "duplicate_token":
        return duplicate_token_pattern(tokens)
    if name == "induction":
        return induction_pattern(tokens)
    raise QkvError(f"unknown detector {name!r}: choose one of {', '.join(NAMES)}")


def score(weights, P, measure: str = "mul", exclude_first: bool = False, exclude_current: bool = False):
    """[..., m, m] weights, [m, m] pattern -> [...] one score per head (see the module doc for the measures)."""
    if measure not in MEASURES:
        raise QkvError(f"unknown detector measure {measure!r}: choose one of {', '.join(MEASURES)}")
    w = np.asarray(weights, dtype=np.float64)
    m = w.shape[-1]
    if w.shape[-2] != m or P.shape != (m, m):
        raise QkvError(f"head detectors need self-attention (m x m weights), got {w.shape[-2]} x {m}")
    keep = np.ones((m, m))
    if exclude_first:
        keep[:, 0] = 0
    if exclude_current:
        np.fill_diagonal(keep, 0)
    if measure == "mul":
        kept = w * keep  # (..., m, m)
        total = kept.sum(axis=(-2, -1))
        hit = (kept * P).sum(axis=(-2, -1))
        return np.divide(hit, total, out=np.zeros_like(hit), where=total > 0)
    return 1.0 - (np.abs(w - P) * keep).sum(axis=(-2, -1)) / m


def detector_scores(weights, tokens, measure: str = "mul", exclude_first: bool = False,
                    exclude_current: bool = False) -> dict:  # fmt: skip
    """weights [..., m, m] of one sentence, tokens [m] -> {name: [...] scores} for the three detectors.

    tokens: vocabulary ids (or strings: the word tokenizer); None counts every token as distinct (no repeats)."""
    m = np.shape(weights)[-1]
    tokens = np.arange(m) if tokens is None else tokens
    if len(tokens) != m:
        raise QkvError(f"head detectors: {len(tokens)} tokens for weights over {m} keys")
    return {name: score(weights, pattern(name, tokens), measure, exclude_first, exclude_current) for name in NAMES}
