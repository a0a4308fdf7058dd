"""The forward passes of a scan's block: one MODEL Result per text, each exactly what `qkv heads TEXT` computes."""

from __future__ import annotations

import numpy as np


def forward_many(model, items, plan, check_memory):
    """[(text_id, Tokens)] -> an iterator of MODEL Results in the same order (every layer's attention kept)."""
    for _, tokens in items:
        m = len(tokens.strings)
        check_memory(model, plan, m)
        ids = np.asarray(tokens.ids, dtype=np.int64)
        yield model.forward(ids, layers=[], kernel=plan.kernel, tokens=tokens)
