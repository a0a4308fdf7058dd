"""The forward passes of a scan: several texts in one pass, so each layer's weights are read once per batch.

A batch stacks the B texts' rows: H = [H_1; ...; H_B] (N = m_1 + ... + m_B rows, d columns). Everything but the
attention works row by row (norms, the projections H [W^q | W^k | W^v], W^o, the MLP or the experts), so the
family's own block runs on the stack unchanged, and each matrix product reads the weights once for N rows instead
of once per text. The attention is kept within each text by the batch mask: block diagonal, text b's own Mask_b
(causal, its window or chunk) on its block and -inf everywhere else (the padding mask of a batch without padding),
so a query never sees another text's key and its weight there is exactly 0:

    Mask = [[Mask_1, -inf, ...], [-inf, Mask_2, ...], ...]        (N x N)
    alpha_b = alpha[rows of b, keys of b]                         (tau, m_b, m_b): text b's weights

Each text embeds alone (its positions 0..m_b - 1: BERT's and GPT-2's learned positions). RoPE rotates the stacked
rows at positions 0..N-1; Q K^T after RoPE depends only on i - t, which is the same inside each block, so the
scores equal the text's own (to rounding, ~1e-13 in float64). A batch is only formed where that holds: every
layer's RoPE frequencies must be those of each text alone (dynamic NTK and LongRoPE change with the length), and no
query temperature of absolute positions (Llama 4's NoPE layers); otherwise, and for a text alone, the texts run
one at a time through Model.forward, exactly as `qkv heads TEXT` runs them. An encoder-decoder (T5, BART, Marian)
is scanned on its encoder's self-attention over each text, one at a time, as `qkv heads TEXT --attention encoder`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class TextRun:
    """What pipeline.scan.scores reads of one text's pass: its attention, ids, labels and learned-sink shares."""

    attentions: np.ndarray  # (L, tau, m, m)
    ids: np.ndarray  # (m,)
    labels: list
    sinks: np.ndarray | None = None  # (L, tau, m): gpt-oss's 1 - row sums
    allowed: np.ndarray | None = None  # (m, m) True = may attend: random weights' mask, as qkv heads reads it


def batches(items, batch_tokens: int) -> list[list[int]]:
    """Indices of items grouped shortest first, each group at most batch_tokens rows (a longer text alone)."""
    order = sorted(range(len(items)), key=lambda i: (len(items[i][1].strings), i))
    out, group, rows = [], [], 0
    for i in order:
        m = len(items[i][1].strings)
        if group and rows + m > batch_tokens:
            out.append(group)
            group, rows = [], 0
        group.append(i)
        rows += m
    if group:
        out.append(group)
    return out


def stackable(model, lengths: list[int]) -> bool:
    """Whether these texts may share one pass (see the module doc): RoPE frequencies independent of the length."""
    from qkv_cli.models.layers.rope import inv_freq

    c = model.config
    if len(lengths) < 2 or getattr(c.attention, "temperature", None):
        return False
    rope = getattr(c, "rope", None)
    if rope is None:
        return True
    N = sum(lengths)
    for l in range(c.n_layers):
        r = rope.of(model.family.layer_type(c, l), l)
        if r is None:
            continue
        whole, scale = inv_freq(r, N, model.dtype)
        for m in set(lengths):
            alone, s = inv_freq(r, m, model.dtype)
            if s != scale or not np.array_equal(alone, whole):
                return False
    return True


def batch_masks(model, lengths: list[int]) -> list[np.ndarray]:
    """Each layer's block-diagonal additive mask over the stacked rows (built once per mask rule)."""
    from qkv_cli.core import masks

    c, fam, dt = model.config, model.family, model.dtype
    N = sum(lengths)
    by_rule, out = {}, []
    for l in range(c.n_layers):
        spec = fam.layer_mask(c, l)
        if spec.key not in by_rule:
            M = np.full((N, N), -np.inf, dtype=dt)
            at = 0
            for m in lengths:
                own = masks.additive(spec, m, m, dt)
                M[at : at + m, at : at + m] = 0 if own is None else own
                at += m
            by_rule[spec.key] = M
        out.append(by_rule[spec.key])
    return out


def forward_stacked(model, items, kernel: str) -> list[TextRun]:
    """[(text_id, Tokens)] -> one TextRun per text, from one pass over the stacked rows."""
    from qkv_cli.models.model import check_finite, sink_share

    c, fam, p = model.config, model.family, model.params
    ids = [np.asarray(tokens.ids, dtype=np.int64) for _, tokens in items]
    lengths = [len(i) for i in ids]
    x = np.concatenate([fam.embed(p, c, i) for i in ids])  # (N, d): each text at its own positions
    x = np.asfortranarray(x)  # laid out as one text's embedding (column-major products and residual sums)
    kept = [np.empty((c.n_layers, c.n_heads, m, m), dtype=model.dtype) for m in lengths]
    starts = np.cumsum([0, *lengths])
    for l, mask in enumerate(batch_masks(model, lengths)):
        x, parts = fam.block(p, c, l, x, mask, kernel)
        check_finite(x, l, model.name)
        for b, (a, e) in enumerate(zip(starts[:-1], starts[1:], strict=True)):
            kept[b][l] = parts.weights[:, a:e, a:e]  # (tau, m_b, m_b): text b's own block
    sinks = getattr(c.attention, "sinks", False)
    return [TextRun(w, i, list(tokens.labels), sink_share(w) if sinks else None)
            for w, i, (_, tokens) in zip(kept, ids, items, strict=True)]  # fmt: skip


def forward_many(model, items, plan, check_memory):
    """[(text_id, Tokens)] -> their runs in the same order: batches of at most plan.batch_tokens rows, stacked
    where stackable, else one text at a time through Model.forward (what `qkv heads` runs)."""
    if model.is_encoder_decoder:
        return [encoder_run(model, tokens, plan, check_memory) for _, tokens in items]
    runs: list = [None] * len(items)
    for group in batches(items, plan.batch_tokens):
        lengths = [len(items[i][1].strings) for i in group]
        if stackable(model, lengths):
            check_memory(model, plan, sum(lengths), batch=len(group), kept=lengths)
            for i, run in zip(group, forward_stacked(model, [items[i] for i in group], plan.kernel), strict=True):
                runs[i] = run
            continue
        for i in group:
            tokens = items[i][1]
            check_memory(model, plan, len(tokens.strings))
            ids = np.asarray(tokens.ids, dtype=np.int64)
            runs[i] = model.forward(ids, layers=[], kernel=plan.kernel, tokens=tokens)
    return runs


def encoder_run(model, tokens, plan, check_memory) -> TextRun:
    """An encoder-decoder's encoder over one text: its self-attention, every layer (L_enc, tau, n, n)."""
    check_memory(model, plan, len(tokens.strings))
    ids = model.check_source(np.asarray(tokens.ids, dtype=np.int64))
    _, parts = model.encode(ids)
    return TextRun(np.stack([a.weights for a in parts]), ids, list(tokens.labels))
