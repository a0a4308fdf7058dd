"""qkv compare: two texts on one model, or one text on two models that share a tokenizer; the weights of both and
their difference B - A at the aligned positions (pipeline.compare_align), per layer and head.

For each layer l, head j and aligned query i (A's position a_i, B's b_i), the rows alpha_A = A[l, j, a_i] and
alpha_B = B[l, j, b_i] are two distributions over keys; aligned keys are one outcome, a key left out of the
alignment is an outcome of its side only. Their total-variation distance

    TV_i = 1/2 (sum_k |alpha_B[b_k] - alpha_A[a_k]| + weight of alpha_A off the aligned keys + that of alpha_B)

is 0 for identical rows and 1 for rows with no weight in common; a head's TV is its mean over the aligned queries.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from qkv_cli.core import budget
from qkv_cli.core.result import Kind, Result
from qkv_cli.errors import QkvError, TooLargeError
from qkv_cli.pipeline.compare_align import Alignment, align
from qkv_cli.pipeline.request import Request


@dataclass(frozen=True)
class Comparison:
    """Two runs A and B and their difference. mode: "texts" (two texts, one model) or "models" (one text, two)."""

    mode: str
    a: Result  # run A (a checkpoint's MODEL result, or a SEEDED layer of seeded random weights)
    b: Result
    names: tuple[str, str]  # what A and B are: the two texts, or the two models' names
    alignment: Alignment
    layers: tuple[int, ...]  # the layers of the L axis below (random weights: (0,), its one layer)
    layer: int  # the layer shown first: --layer, else the last (random weights: 0)
    weights_a: np.ndarray  # (L, tau, m_A, m_A) A's weights, every layer and head
    weights_b: np.ndarray  # (L, tau, m_B, m_B)
    diff: np.ndarray  # (L, tau, k, k): B - A on the k aligned queries and keys
    tv: np.ndarray  # (L, tau): the mean total-variation distance of the aligned query rows
    max_change: np.ndarray  # (L, tau): the signed B - A of largest size
    at: np.ndarray  # (L, tau, 2): where it is, as (aligned query, aligned key) indices into alignment.a / .b

    @property
    def tau(self) -> int:
        return self.weights_a.shape[1]

    @property
    def checkpoint(self) -> bool:
        return self.a.kind == Kind.MODEL

    def head(self, head: int | None = None, layer: int | None = None) -> int:
        """head (checked), or the head of `layer` (default self.layer) that moved most: the largest TV."""
        if head is None:
            return int(np.argmax(self.tv[self.layers.index(self.layer if layer is None else layer)]))
        if isinstance(head, bool) or not isinstance(head, int | np.integer) or not 0 <= head < self.tau:
            raise QkvError(f"head {head!r} does not exist: heads are numbered 0..{self.tau - 1}")
        return int(head)

    def masked(self, side: str, layer: int) -> np.ndarray:
        """(m, m) bool: the keys layer `layer`'s mask removes in run `side` ("a" or "b")."""
        run = self.a if side == "a" else self.b
        return run.layer_masked(layer) if run.kind == Kind.MODEL else run.masked

    def moved(self, top: int | None = None) -> list[dict]:
        """The heads by how far they moved (TV, largest first): layer, head, tv, max_change, query, key (A's)."""
        al = self.alignment
        rows = []
        for li, layer in enumerate(self.layers):
            for j in range(self.tau):
                q, k = (int(x) for x in self.at[li, j])
                rows.append({"layer": layer, "head": j, "query": q, "key": k, "tv": float(self.tv[li, j]),
                             "max_change": float(self.max_change[li, j]), "query_a": int(al.a[q]),
                             "key_a": int(al.a[k]), "query_b": int(al.b[q]), "key_b": int(al.b[k])})  # fmt: skip
        rows.sort(key=lambda r: (-r["tv"], r["layer"], r["head"]))
        return rows if top is None else rows[:top]


def within(limit: int, held: int, call):
    """call() under the budget less `held` bytes (what the other run and model keep); a refusal says so."""
    if not held:
        return call()
    try:
        return call()
    except TooLargeError as exc:
        raise TooLargeError(f"{exc} (what is left of --max-memory {budget.human(limit)} beside the "
                            f"{budget.human(held)} the other run and model keep)") from None  # fmt: skip


def weights_of(result: Result) -> tuple[tuple[int, ...], np.ndarray]:
    """(the layers, their weights (L, tau, m, m)) of a checkpoint run or of one random-weights layer."""
    if result.kind == Kind.MODEL:
        kept = result.attention_layers
        return tuple(range(len(result.layer_types)) if kept is None else kept), result.attentions
    return (0,), result.weights[None]


def difference(wa: np.ndarray, wb: np.ndarray, al: Alignment):
    """(L, tau, m_A, m_A), (L, tau, m_B, m_B) -> diff (L, tau, k, k), tv (L, tau), max_change (L, tau), at."""
    A = wa[:, :, al.a][:, :, :, al.a]  # (L, tau, k, k): aligned queries x aligned keys
    B = wb[:, :, al.b][:, :, :, al.b]
    diff = B - A
    off_a = wa[:, :, al.a].sum(-1) - A.sum(-1)  # (L, tau, k): weight on keys left out of the alignment
    off_b = wb[:, :, al.b].sum(-1) - B.sum(-1)
    tv_rows = 0.5 * (np.abs(diff).sum(-1) + off_a + off_b)  # (L, tau, k)
    tv = tv_rows.mean(-1)
    L, tau, k, _ = diff.shape
    flat = np.abs(diff).reshape(L, tau, k * k).argmax(-1)  # (L, tau)
    at = np.stack(np.divmod(flat, k), axis=-1)  # (L, tau, 2): (query, key)
    biggest = np.take_along_axis(diff.reshape(L, tau, k * k), flat[..., None], -1)[..., 0]
    return diff, tv, biggest, at


def check_models(ma, mb) -> None:
    """Two models compared on one text: the same layers and heads (a base model and its instruct version)."""
    for model in (ma, mb):
        if model is not None and model.is_encoder_decoder:
            raise QkvError(f"qkv compare reads a decoder's or an encoder's attention, not an encoder-decoder's "
                           f"({model.name})")  # fmt: skip
    shape_a = (ma.config.n_layers, ma.config.n_heads)
    shape_b = (mb.config.n_layers, mb.config.n_heads)
    if shape_a != shape_b:
        raise QkvError(f"{ma.name} has {shape_a[0]} layers x {shape_a[1]} heads and {mb.name} {shape_b[0]} x "
                       f"{shape_b[1]}: two models are compared head by head, so they need the same layers and "
                       "heads (a base model and its instruct version)")  # fmt: skip


def check_same_ids(a: Result, b: Result, names) -> None:
    """One text on two models: both must read it as the same ids (one tokenizer), else nothing lines up."""
    ia, ib = list(a.ids), list(b.ids)
    if ia != ib:
        first = next((i for i, (x, y) in enumerate(zip(ia, ib, strict=False)) if x != y), min(len(ia), len(ib)))
        raise QkvError(f"{names[0]} and {names[1]} tokenize the text differently ({len(ia)} and {len(ib)} tokens, "
                       f"first difference at position {first}): comparing two models needs one tokenizer "
                       "(a base model and its instruct version)")  # fmt: skip


def run(req: Request, texts: tuple[str, ...], models: tuple = ()) -> Comparison:
    """texts (A, B) on models () (random weights, req.settings) or (M,); or texts (T,) on models (M1, M2)."""
    from qkv_cli.pipeline.compute import compute

    if len(texts) == 2 and len(models) <= 1:
        mode, pairs = "texts", [(texts[0], models[0] if models else None), (texts[1], models[0] if models else None)]
        names = (texts[0], texts[1])
    elif len(texts) == 1 and len(models) == 2:
        check_models(*models)
        mode, pairs, names = "models", [(texts[0], models[0]), (texts[0], models[1])], (models[0].name, models[1].name)
    else:
        raise QkvError("qkv compare takes two texts (compare A B, on one model or on random weights) or one text "
                       "and two models (compare TEXT --model M1 --model M2)")  # fmt: skip
    for model in models[:1] if mode == "texts" else ():
        if model is not None and model.is_encoder_decoder:
            raise QkvError(f"qkv compare reads a decoder's or an encoder's attention, not an encoder-decoder's "
                           f"({model.name})")  # fmt: skip
    limit = budget.default_max_memory() if req.limits.max_memory is None else req.limits.max_memory
    runs = []
    for at, (text, model) in enumerate(pairs):  # each run's budget is what the rest leaves: both runs are kept
        held = sum(weights_of(r)[1].nbytes for r in runs)  # A's weights, while B runs
        if mode == "models":
            held += models[1 - at].weights_bytes  # the other model stays loaded
        side = req.changed(text=text, model=None if model is None else model.name, max_memory=max(1, limit - held))
        runs.append(within(limit, held, lambda side=side, model=model: compute(side, model)))
    a, b = runs
    if mode == "models":
        check_same_ids(a, b, names)
    keys_a, keys_b = a.token_ids, b.token_ids
    if keys_a is None or keys_b is None:  # the word tokenizer of random weights: its tokens are its ids
        keys_a, keys_b = a.tokens.strings, b.tokens.strings
    alignment = align(keys_a, keys_b)
    layers, wa = weights_of(a)
    _, wb = weights_of(b)
    diff, tv, biggest, at = difference(wa, wb, alignment)
    shown = a.first_layer().model.layer if a.kind == Kind.MODEL else 0
    return Comparison(mode, a, b, names, alignment, layers, shown, wa, wb, diff, tv, biggest, at)
