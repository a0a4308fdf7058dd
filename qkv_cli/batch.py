"""Batches: several sentences run together, padded to the longest, with the pad keys masked.

Sentence b has m_b tokens; every sentence is padded on the right with PAD tokens to L = max m_b. The pad keys
(positions m_b..L-1) get -inf in the Mask, so no real query puts weight on them; pad queries still get computed
(they are rows like any other) but are dropped from what is shown. Padding on the right keeps every real token's
position, so each sentence's weights equal a run of that sentence alone.
NumPy only.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from qkv_cli.errors import QkvError

PAD = "[PAD]"
MAX_SENTENCES = 10_000


@dataclass
class Batch:
    results: list  # one Result per sentence, trimmed to its own tokens (no pads)
    padded: list  # the padded Result of each sentence (L tokens, pad keys masked)
    lengths: list[int]  # m_b

    @property
    def L(self) -> int:
        return max(self.lengths)


def sentences(text: str) -> list[str]:
    """One sentence per non-empty line."""
    lines = [line.strip() for line in text.splitlines()]
    lines = [line for line in lines if line]
    if not lines:
        raise QkvError("--batch needs at least one non-empty line (one sentence per line)")
    if len(lines) > MAX_SENTENCES:
        raise QkvError(f"--batch got {len(lines)} lines: at most {MAX_SENTENCES} sentences")
    return lines


def pad_tokens(tokens, L: int):
    """Tokens padded on the right with PAD to length L."""
    from qkv_cli.tokens import Tokens

    k = L - len(tokens)
    ids = None if tokens.ids is None else tuple(tokens.ids) + (0,) * k
    return Tokens(
        strings=tuple(tokens.strings) + (PAD,) * k,
        labels=tuple(tokens.labels) + (PAD,) * k,
        offsets=tuple(tokens.offsets) + ((0, 0),) * k,
        ids=ids,
    )


def trim(result, tokens, m: int):
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
        extra={k: v for k, v in result.extra.items() if k != "padding"},
    )


def run_batch(lines: list[str], settings, max_memory: int | None = None) -> Batch:
    """Tokenize every line, pad to the longest, run each padded sentence with its pad keys masked."""
    from qkv_cli.pipeline import run
    from qkv_cli.tokens import tokenize

    toks = [tokenize(line, settings.tokenizer) for line in lines]
    lengths = [len(t) for t in toks]
    L = max(lengths)
    results, padded = [], []
    for line, t, m in zip(lines, toks, lengths, strict=True):
        padding = np.arange(L) >= m  # (L,) True = pad key
        full = run(line, settings, tokens=pad_tokens(t, L), padding=padding, max_memory=max_memory)
        padded.append(full)
        results.append(trim(full, t, m))
    return Batch(results=results, padded=padded, lengths=lengths)


def arrays(batch: Batch) -> dict:
    """The export schema with a leading batch axis B on every per-sentence matrix (padded to L), plus `lengths`
    (B,) and `padding` (B, L) (True = pad). Weights Wq, Wk, Wv, Wo and the scalars are shared."""
    from qkv_cli.export import arrays as one

    per = [one(r) for r in batch.padded]
    shared = ("Wq", "Wk", "Wv", "Wo", "d", "tau", "scale", "seed", "kernel")
    out = {k: per[0][k] for k in shared}
    for k in per[0]:
        if k not in shared:
            out[k] = np.stack([p[k] for p in per])
    out["lengths"] = np.array(batch.lengths, dtype=np.int64)
    out["padding"] = np.stack([r.extra["padding"] for r in batch.padded])
    return out
