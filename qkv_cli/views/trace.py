"""`qkv explain`: the computation of one head, step by step, in the notation of the README.

The trace recomputes every step from the run's inputs (H, W_j^q, W_j^k, W_j^v, Mask, scale, W^o, and for a
checkpoint the biases b_j^q, b_j^k, b_j^v, b^o) with the plain formulas, one line each, so a reader can check the
numbers against `qkv run` (a test does).
NumPy only: rendering lives in views/explain.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from qkv_cli.core.gqa import groups, kv_head_of
from qkv_cli.core.numerics import scale_, softmax
from qkv_cli.errors import QkvError


@dataclass
class Step:
    """One matrix of the walk-through."""

    name: str  # the export name (H, Wq, Q, scores, ...)
    formula: str  # in the README's notation
    matrix: np.ndarray  # 2-D
    rows: list[str]  # row labels
    cols: list[str]  # column labels
    note: str = ""
    grid: bool = False  # a queries x keys grid (scores, mask, weights)

    @property
    def shape(self) -> str:
        return f"{self.matrix.shape[0]} x {self.matrix.shape[1]}"


@dataclass
class Trace:
    head: int
    kv_head: int
    steps: list[Step] = field(default_factory=list)

    def __getitem__(self, name: str) -> Step:
        for step in self.steps:
            if step.name == name:
                return step
        raise KeyError(name)


def check_head(head: int, tau: int) -> None:
    if not 0 <= head < tau:
        raise QkvError(f"--head {head} does not exist: heads are numbered 0..{tau - 1}")


def numbered(k: int, prefix: str = "") -> list[str]:
    return [f"{prefix}{c}" for c in range(k)]


def trace(result, head: int = 0) -> Trace:
    """Every step of head `head` for a pipeline Result, recomputed with the textbook formulas."""
    s = result.settings
    tau = result.Q.shape[0]
    G = result.K.shape[0]
    check_head(head, tau)
    g = kv_head_of(head, tau, G)
    j = head
    X = result.H  # queries come from X (the text)
    ctx = result.H_context
    Y = X if ctx is None else ctx  # keys and values from Y (the context in cross-attention)
    d = X.shape[1]
    dk = result.Q.shape[2]
    rows, keys = result.labels, result.key_labels
    feat_d, feat_k = numbered(d), numbered(dk)
    ablated = None if s is None else s.ablate
    group = groups(tau, G)[g]
    shared = f" (shared by query heads {group[0]}..{group[-1]})" if G != tau else ""
    kvj = f"{g}" if G != tau else f"{j}"

    b = biases(result, tau, G, dk, d)  # a checkpoint's b_j^q, b_j^k, b_j^v (tau or G, dk), b^o (d,); zeros otherwise

    def projected(letter, H, W, bias):
        if ablated == letter.lower():
            return getattr(result, letter)[j if letter == "Q" else g], f"ablated: replaced by {s.ablate_with}"
        return H @ W + bias, ""

    Wq, Wk, Wv = result.Wq[j], result.Wk[g], result.Wv[g]
    Q, q_note = projected("Q", X, Wq, b["bq"][j])  # (m, d) x (d, dk) + (dk,) -> (m, dk)
    K, k_note = projected("K", Y, Wk, b["bk"][g])  # (n, d) x (d, dk) + (dk,) -> (n, dk)
    V, v_note = projected("V", Y, Wv, b["bv"][g])
    scale = result.scale
    scores = scale_(Q @ K.T, scale)  # (m, dk) x (dk, n) -> (m, n)
    mask = result.mask
    alpha = softmax(scores + mask)
    head_out = alpha @ V  # (m, n) x (n, dk) -> (m, dk)

    # every head's output, by the same formulas, for concat(head_1..head_tau) W^o
    outs = []
    for h in range(tau):
        gh = kv_head_of(h, tau, G)
        Qh = result.Q[h] if ablated == "q" else X @ result.Wq[h] + b["bq"][h]
        Kh = result.K[gh] if ablated == "k" else Y @ result.Wk[gh] + b["bk"][gh]
        Vh = result.V[gh] if ablated == "v" else Y @ result.Wv[gh] + b["bv"][gh]
        outs.append(softmax(scale_(Qh @ Kh.T, scale) + mask) @ Vh)
    concat = np.concatenate(outs, axis=1)  # (m, tau * dk) = (m, d)
    output = concat @ result.Wo + b["bo"]  # (m, tau dk) x (tau dk, d) + (d,) -> (m, d)

    model = result.model
    if model is None:
        positions = "token vectors + sinusoidal positions" if s.positions == "sinusoidal" else "token vectors"
        scale_text = {"auto": "1/sqrt(d_k)", "none": "1", "sqrt": "sqrt(d_k), the misprint"}.get(s.scale, "given")
        learned, source = " (learned in a real model; seeded here)", s.projection
    else:
        positions = f"layer {model.layer}'s attention input: {model.attention_input}"
        scale_text = "1/sqrt(d_k)" if np.isclose(scale, 1 / np.sqrt(dk)) else "the checkpoint's"
        learned, source = "", f"learned: {model.name} layer {model.layer}"

    def plus(k, letter):  # the bias term of a projection, when the Result has biases
        return f" + b_{k}^{letter}" if b["given"] else ""

    steps = [Step("H", "H: one row per token", X, rows, feat_d, positions)]
    if ctx is not None:
        steps.append(
            Step(
                "H_context",
                "Y: one row per context token (cross-attention)",
                Y,
                keys,
                feat_d,
                "keys and values come from Y, queries from H",
            )
        )
    steps.append(Step("Wq", f"W_{j}^q{learned}", Wq, feat_d, feat_k, source))
    if b["given"]:
        steps.append(Step("bq", f"b_{j}^q: added to every row of H W_{j}^q", b["bq"][j][None], ["b"], feat_k, source))
    steps.append(Step("Wk", f"W_{kvj}^k{shared}", Wk, feat_d, feat_k, source))
    if b["given"]:
        steps.append(Step("bk", f"b_{kvj}^k{shared}", b["bk"][g][None], ["b"], feat_k, source))
    steps.append(Step("Wv", f"W_{kvj}^v{shared}", Wv, feat_d, feat_k, source))
    if b["given"]:
        steps.append(Step("bv", f"b_{kvj}^v{shared}", b["bv"][g][None], ["b"], feat_k, source))
    HY = "Y" if ctx is not None else "H"
    steps += [
        Step("Q", f"Q^[{j}] = H W_{j}^q{plus(j, 'q')}", Q, rows, feat_k, q_note),
        Step("K", f"K^[{kvj}] = {HY} W_{kvj}^k{plus(kvj, 'k')}", K, keys, feat_k, k_note),
        Step("V", f"V^[{kvj}] = {HY} W_{kvj}^v{plus(kvj, 'v')}", V, keys, feat_k, v_note),
        Step(
            "scores",
            f"S = Q^[{j}] K^[{kvj}]^T * scale, scale = {scale:.4g} = {scale_text}",
            scores,
            rows,
            keys,
            "before the mask",
            grid=True,
        ),
        Step("mask", "Mask: 0 = may attend, -inf = may not", mask, rows, keys, grid=True),
        Step("weights", "alpha = Softmax(S + Mask), row by row: each row sums to 1", alpha, rows, keys, grid=True),
        Step("heads", f"head_{j} = alpha V^[{kvj}]: row i is a weighted sum of the rows of V", head_out, rows, feat_k),
        Step(
            "concat",
            f"concat(head_0..head_{tau - 1}): every head's output side by side",
            concat,
            rows,
            numbered(tau * dk),
        ),
        Step("Wo", "W^o", result.Wo, numbered(tau * dk), feat_d, source),
    ]
    if b["given"]:
        steps.append(Step("bo", "b^o: added to every row of concat(heads) W^o", b["bo"][None], ["b"], feat_d, source))
    steps.append(Step("output", f"output = concat(heads) W^o{' + b^o' if b['given'] else ''}", output, rows, feat_d))
    return Trace(head=j, kv_head=g, steps=steps)


def biases(result, tau: int, G: int, dk: int, d: int) -> dict:
    """A checkpoint's b_j^q (tau, dk), b_j^k, b_j^v (G, dk) and b^o (d,); zeros where the Result has none.

    "given" says whether the Result had them (the random-weights pipeline has no biases)."""
    dtype = result.H.dtype
    shapes = {"bq": (tau, dk), "bk": (G, dk), "bv": (G, dk), "bo": (d,)}
    have = result.biases
    out = {k: np.asarray(have[k]) if k in have else np.zeros(shape, dtype) for k, shape in shapes.items()}
    out["given"] = bool(have)
    return out


def _zoom(i, labels, q, K, V, mask, dots, scale) -> dict:
    scaled = dots * scale
    score = scaled + mask
    finite = score[np.isfinite(score)]
    top = float(finite.max()) if finite.size else 0.0
    e = np.where(np.isfinite(score), np.exp(np.where(np.isfinite(score), score, 0.0) - top), 0.0)
    total = float(e.sum())
    alpha = e / total if total > 0 else np.zeros_like(e)
    terms = alpha[:, None] * V  # alpha_t v_t, one row per key
    return {
        "query": i,
        "token": labels[i],
        "q": q,
        "scale": scale,
        "dot": dots,
        "scaled": scaled,
        "mask": mask,
        "score": score,
        "max": top,
        "exp": e,
        "sum": total,
        "weights": alpha,
        "V": V,
        "terms": terms,
        "output": terms.sum(axis=0),
    }


def query_zoom(tr: Trace, i: int, labels, scale: float) -> dict:
    """Query i of the traced head (see zoom), with the run's scale given explicitly."""
    m = tr["Q"].matrix.shape[0]
    if not 0 <= i < m:
        raise QkvError(f"--query {i} does not exist: queries are numbered 0..{m - 1} (the text has {m} tokens)")
    q = tr["Q"].matrix[i]
    K, V = tr["K"].matrix, tr["V"].matrix
    return _zoom(i, labels, q, K, V, tr["mask"].matrix[i], K @ q, scale)
