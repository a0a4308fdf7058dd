"""`qkv explain`: the computation of one head, step by step, in the notation of the README.

The trace recomputes every step from the run's inputs (H, W_j^q, W_j^k, W_j^v, Mask, scale, W^o; for a checkpoint
its biases, QK-norm weights and RoPE frequencies) with the plain formulas, one line each, so a reader can check
the numbers against `qkv run` (a test does). NumPy only: rendering lives in views/explain.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from qkv_cli.core import rope
from qkv_cli.core.gqa import groups, kv_head_of
from qkv_cli.core.numerics import scale_, softcap_, softmax
from qkv_cli.errors import QkvError
from qkv_cli.views.console.trace_steps import Step, steps_for


@dataclass
class Trace:
    head: int
    kv_head: int
    steps: list[Step] = field(default_factory=list)
    projections: dict = field(default_factory=dict)  # every head's Q, K, V at each stage (for the zoom)

    def __getitem__(self, name: str) -> Step:
        for step in self.steps:
            if step.name == name:
                return step
        raise KeyError(name)

    def __contains__(self, name: str) -> bool:
        return any(step.name == name for step in self.steps)


def check_head(head: int, tau: int) -> None:
    if not 0 <= head < tau:
        raise QkvError(f"--head {head} does not exist: heads are numbered 0..{tau - 1}")


def rms(x, w, eps, offset):  # [..., n] -> [..., n]: x / sqrt(mean(x^2) + eps) * (offset + w)
    return x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + eps) * (offset + w)


def projections(result) -> dict:
    """Every head's Q, K, V by the plain formulas: H W + b, then QK-norm, then RoPE (as far as the model goes)."""
    if result.latent is not None:  # multi-head latent attention: from the latents (views.console.trace_mla)
        from qkv_cli.views.console.trace_mla import latent_projections

        return latent_projections(result)
    X = result.H
    Y = X if result.H_context is None else result.H_context  # keys and values from Y in cross-attention
    b = result.biases
    Q = np.stack([X @ result.Wq[j] + (b["bq"][j] if "bq" in b else 0) for j in range(result.tau)])
    K = np.stack([Y @ result.Wk[g] + (b["bk"][g] if "bk" in b else 0) for g in range(result.G)])
    V = np.stack([Y @ result.Wv[g] + (b["bv"][g] if "bv" in b else 0) for g in range(result.G)])
    out = {"Q_proj": Q, "K_proj": K, "V": V}
    ablated = None if result.settings is None else result.settings.ablate
    if ablated:  # the run replaced that projection's output: take it from the run
        out[{"q": "Q_proj", "k": "K_proj", "v": "V"}[ablated]] = getattr(result, ablated.upper())
    Q, K = out["Q_proj"], out["K_proj"]
    n = result.qk_norm
    if n is not None:  # QK-norm, per head over d_k, or over the whole projection (all heads at once)
        if n["per_head"]:
            Q, K = rms(Q, n["q"], n["eps"], n["offset"]), rms(K, n["k"], n["eps"], n["offset"])
        else:
            flat = [rms(P.transpose(1, 0, 2).reshape(P.shape[1], -1), n[x], n["eps"], n["offset"]) for P, x in
                    ((Q, "q"), (K, "k"))]  # fmt: skip
            Q, K = (f.reshape(f.shape[0], -1, P.shape[2]).transpose(1, 0, 2) for f, P in zip(flat, (Q, K), strict=True))
    out["Q_pre_rope"], out["K_pre_rope"] = Q, K
    if result.rope_freq is not None:
        cos, sin = rope.cos_sin(result.rope_freq, X.shape[0], result.rope_scaling, X.dtype)
        Q, K = rope.apply(Q, cos, sin), rope.apply(K, cos, sin)
    after = result.after_rope or {}  # Llama 4: an L2 norm after RoPE, or a NoPE layer's query temperature
    if "l2_eps" in after:
        out["Q_rotated"], out["K_rotated"] = Q, K
        Q, K = (X / np.sqrt((X * X).mean(axis=-1, keepdims=True) + after["l2_eps"]) for X in (Q, K))
    if "temperature" in after:
        out["Q_untempered"] = Q
        Q = Q * np.asarray(after["temperature"])[:, None]  # query p times its factor
    out["Q"], out["K"] = Q, K
    return out


def attend(Q, K, V, mask, scale, cap, sink=None):  # one head: -> (S before the cap, S, alpha, alpha V)
    raw = scale_(Q @ K.T, scale)  # (m, dk) x (dk, n) -> (m, n), times the scale
    S = softcap_(raw.copy(), cap)  # tanh(S / c) c, when the model soft-caps
    if sink is None:
        alpha = softmax(S + mask)
    else:  # attention sinks (gpt-oss): Softmax([S + Mask, s_j]), the sink's column dropped
        alpha = softmax(np.concatenate([S + mask, np.full((S.shape[0], 1), sink, dtype=S.dtype)], axis=1))[:, :-1]
    return raw, S, alpha, alpha @ V  # (m, n) x (n, dk) -> (m, dk)


def trace(result, head: int = 0) -> Trace:
    """Every step of head `head` for a SEEDED or LAYER Result, recomputed with the textbook formulas."""
    tau, G = result.tau, result.G
    check_head(head, tau)
    g = kv_head_of(head, tau, G)
    p = projections(result)
    sinks = result.sink_logits
    outs = [attend(p["Q"][h], p["K"][kv_head_of(h, tau, G)], p["V"][kv_head_of(h, tau, G)], result.mask,
                   result.scale, result.softcap, None if sinks is None else sinks[h]) for h in range(tau)]  # fmt: skip
    concat = np.concatenate([o[3] for o in outs], axis=1)  # (m, tau d_k)
    b = result.biases
    output = concat @ result.Wo + (b["bo"] if "bo" in b else 0)  # (m, tau dk) x (tau dk, d) + b^o -> (m, d)
    group = groups(tau, G)[g]
    shared = f" (shared by query heads {group[0]}..{group[-1]})" if G != tau else ""
    walk = steps_for
    if result.latent is not None:  # multi-head latent attention: its own steps (views.console.trace_mla)
        from qkv_cli.views.console.trace_mla import latent_steps as walk
    steps = walk(result, head, g, shared, p, outs[head], concat, output)
    return Trace(head=head, kv_head=g, steps=steps, projections=p)
