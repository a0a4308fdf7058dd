"""One block of a scan's texts, scored: tokens (cut to --max-tokens), the memory check, the forward passes
(pipeline.scan.batch), the scores (pipeline.scan.scores), and the block's shard table (pipeline.scan.store). What the
local engine runs in turn and each Ray actor runs as a task."""

from __future__ import annotations

import numpy as np

from qkv_cli.errors import QkvError
from qkv_cli.text.corpus import Record


def cut_tokens(tokens, n: int):
    """The first n tokens (strings, labels, offsets and ids)."""
    from dataclasses import replace

    return replace(tokens, strings=tokens.strings[:n], labels=tokens.labels[:n], offsets=tokens.offsets[:n],
                   ids=None if tokens.ids is None else tokens.ids[:n])  # fmt: skip


def tokenized(model, plan, block: list[Record]) -> tuple[list, list[dict], int]:
    """([(text_id, Tokens)], the block's problems, how many texts were cut) of one block's records."""
    from qkv_cli.pipeline.chat import prompt

    items, problems, cut = [], [], 0
    for r in block:
        if r.problem is not None:
            problems.append({"text_id": r.text_id, "where": r.where, "problem": r.problem})
            continue
        try:
            tokens = prompt(model, r.text, plan.chat).tokens if plan.max_tokens is None else _long(model, r, plan)
        except QkvError as exc:
            problems.append({"text_id": r.text_id, "where": r.where, "problem": f"{r.where}: {exc}"})
            continue
        if plan.max_tokens is not None and len(tokens.strings) > plan.max_tokens:
            if plan.strict:
                problems.append({"text_id": r.text_id, "where": r.where,
                                 "problem": f"{r.where}: {len(tokens.strings)} tokens, past --max-tokens "
                                            f"{plan.max_tokens} (--strict)"})  # fmt: skip
                continue
            tokens, cut = cut_tokens(tokens, plan.max_tokens), cut + 1
        try:
            model.check_length(len(tokens.strings))  # a cut text may still be longer than the model takes
        except QkvError as exc:
            problems.append({"text_id": r.text_id, "where": r.where, "problem": f"{r.where}: {exc}"})
            continue
        items.append((r.text_id, tokens))
    return items, problems, cut


def _long(model, record: Record, plan):
    """The tokens of a text that may be longer than the model takes: --max-tokens cuts it afterwards."""
    from qkv_cli.pipeline.scan.toy import Toy
    from qkv_cli.text.tokens import encode

    if isinstance(model, Toy):
        return model.tokenize(record.text)
    if plan.chat is not None:
        from qkv_cli.pipeline.chat import prompt

        return prompt(model, record.text, plan.chat).tokens
    return encode(model.tokenizer, record.text, add_special_tokens=True)


def check_memory(model, plan, m: int, batch: int = 1, kept: list[int] | None = None) -> None:
    """Refuse a pass whose memory does not fit the budget, with its figures and the options that help. A batch of
    texts (kept: their lengths, m rows stacked) holds one layer's N x N weights and each text's own."""
    from qkv_cli.core import budget
    from qkv_cli.models import estimate_bytes
    from qkv_cli.pipeline.checkpoint import check_memory as check
    from qkv_cli.pipeline.scan.toy import Toy

    limit = budget.default_max_memory() if plan.max_memory is None else plan.max_memory
    if isinstance(model, Toy):
        return model.check_memory(m, limit)
    c, item = model.config, model.dtype.itemsize
    if kept is None:
        need = estimate_bytes(c, m, model.dtype)
    else:
        need = estimate_bytes(c, m, model.dtype, kept_layers=1) + item * m * m * 2  # + the block-diagonal masks
        need += item * c.n_layers * c.n_heads * sum(k * k for k in kept)
    hint = "--batch-tokens N (smaller batches), --max-tokens N (shorter texts), or --dtype float32"
    what = f"a batch of {batch} texts ({m:,} tokens)" if batch > 1 else f"a text of {m:,} tokens"
    check(model, need, limit, hint, what=what)


def forward(model, plan, items) -> list:
    """Each text's run: batched (pipeline.scan.batch) for a checkpoint, one at a time for random weights."""
    from qkv_cli.pipeline.scan.batch import forward_many
    from qkv_cli.pipeline.scan.toy import Toy

    if isinstance(model, Toy):
        return model.forward_texts(items, plan, check_memory)
    return forward_many(model, items, plan, check_memory)


def score_block(model, plan, block: list[Record]):
    """One block's shard table: every readable text's rows, its problems and cut count in the metadata."""
    from qkv_cli.pipeline.scan.scores import text_scores
    from qkv_cli.pipeline.scan.store import shard_table

    items, problems, cut = tokenized(model, plan, block)
    c = model.config
    L, tau = c.n_layers, c.n_heads
    layer, head = np.repeat(np.arange(L), tau), np.tile(np.arange(tau), L)
    rows = []
    for (text_id, tokens), result in zip(items, forward(model, plan, items), strict=True):
        scores = text_scores(result, plan.measures)
        n = len(tokens.strings)
        rows.append({"text_id": np.full(L * tau, text_id), "layer": layer, "head": head,
                     "n_tokens": np.full(L * tau, n), **scores})  # fmt: skip
    columns = list(plan.measures.columns) + (["sink_share"] if rows and "sink_share" in rows[0] else [])
    return shard_table(columns, rows, problems, cut, len(items), len(block))
