"""Batches: several sentences run together, padded to the longest, with the pad keys masked.

Sentence b has m_b tokens; every sentence is padded on the right with PAD tokens to L = max m_b. The pad keys
(positions m_b..L-1) get -inf in the Mask, so no real query puts weight on them; pad queries still get computed
(they are rows like any other) but are dropped from what is shown. Padding on the right keeps every real token's
position, so each sentence's weights equal a run of that sentence alone.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from qkv_cli.core import budget
from qkv_cli.core.result import BatchResult, Result

PAD = "[PAD]"


def pad_tokens(tokens, L: int):
    """Tokens padded on the right with PAD to length L."""
    from qkv_cli.text.tokens import Tokens

    k = L - len(tokens)
    ids = None if tokens.ids is None else tuple(tokens.ids) + (0,) * k
    return Tokens(
        strings=tuple(tokens.strings) + (PAD,) * k,
        labels=tuple(tokens.labels) + (PAD,) * k,
        offsets=tuple(tokens.offsets) + ((0, 0),) * k,
        ids=ids,
    )


def trim(result: Result, tokens, m: int) -> Result:
    """The padded Result cut back to the sentence's own m tokens (rows and key columns)."""
    return replace(
        result,
        tokens=tokens,
        H=result.H[:m],
        Q=result.Q[:, :m],
        K=result.K[:, :m],
        V=result.V[:, :m],
        scores=result.scores[:, :m, :m],
        mask=result.mask[:m, :m],
        weights=result.weights[:, :m, :m],
        heads=result.heads[:, :m],
        output=result.output[:m],
        rules=replace(result.rules, padding=None),
    )


def run_batch(lines: list[str], settings, max_memory: int | None = None, output=None) -> Result:
    """Tokenize every line, pad to the longest, run each padded sentence with its pad keys masked: a BATCH Result.
    output: core.output_size.Output, the JSON or CSV to print: refused above its limit before anything runs."""
    from qkv_cli.pipeline.output_plan import check_batch
    from qkv_cli.pipeline.seeded import HINTS, estimate, run
    from qkv_cli.text.tokens import tokenize

    toks = [tokenize(line, settings.tokenizer) for line in lines]
    lengths = [len(t) for t in toks]
    L = max(lengths)
    limit = budget.default_max_memory() if max_memory is None else max_memory
    budget.check_budget(len(lines) * estimate(L, settings), limit, f"fewer lines, or {HINTS}",
                        dtype=settings.dtype)  # fmt: skip  # all are kept
    check_batch(output, settings, toks)
    items, padded = [], []
    for line, t, m in zip(lines, toks, lengths, strict=True):
        padding = np.arange(L) >= m  # (L,) True = pad key
        full = run(line, settings, tokens=pad_tokens(t, L), padding=padding, max_memory=max_memory)
        padded.append(full)
        items.append(trim(full, t, m))
    return BatchResult(tokens=items[0].tokens, settings=settings, kernel=settings.kernel,
                  padded=padded, items=items, lengths=lengths)  # fmt: skip
