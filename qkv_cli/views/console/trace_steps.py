"""The steps of one head's walk-through, named as the export names them, in the order the formula runs."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from qkv_cli.core.shapes import scale_kind, scale_root


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


def numbered(k: int, prefix: str = "") -> list[str]:
    return [f"{prefix}{c}" for c in range(k)]


def steps_for(result, j: int, g: int, shared: str, p: dict, head, concat, output) -> list[Step]:
    """Steps for query head j (key/value head g): H, the projections, [QK-norm], [RoPE], scores, [soft-cap], Mask,
    weights, head output, concat, W^o, output."""
    raw, S, alpha, head_out = head
    s, model = result.settings, result.model
    rows, keys = result.labels, result.key_labels
    d, dk, tau = result.d, result.d_k, result.tau
    feat_d, feat_k = numbered(d), numbered(dk)
    b = result.biases
    kvj = f"{g}" if result.G != tau else f"{j}"
    HY = "Y" if result.is_cross else "H"
    if model is None:
        positions = "token vectors + sinusoidal positions" if s.positions == "sinusoidal" else "token vectors"
        scale_text = {"auto": "1/sqrt(d_k)", "none": "1", "sqrt": "sqrt(d_k), the misprint"}.get(s.scale, "given")
        learned, source = " (learned in a real model; seeded here)", s.projection
    else:
        positions = f"layer {model.layer}'s attention input: {model.attention_input}"
        scale = float(result.scale)
        root = scale_root(scale) if scale_kind(dk, scale) == "other" else None  # Gemma: query_pre_attn_scalar
        own = f"{f'{root}^-1/2, ' if root else ''}the checkpoint's own (not 1/sqrt(d_k))"
        scale_text = "1/sqrt(d_k)" if scale_kind(dk, scale) == "plain" else own
        learned, source = "", f"learned: {model.name} layer {model.layer}"
    notes = {x: "" for x in "QKV"}
    if s is not None and s.ablate:
        notes[s.ablate.upper()] = f"ablated: replaced by {s.ablate_with}"

    def plus(k, letter):  # the bias term of a projection, when the checkpoint has it
        return f" + b_{k}^{letter}" if f"b{letter}" in b else ""

    out = [Step("H", "H: one row per token", result.H, rows, feat_d, positions)]
    if result.is_cross:
        out.append(Step("H_context", "Y: one row per context token (cross-attention)", result.H_context, keys, feat_d,
                        "keys and values come from Y, queries from H"))  # fmt: skip
    for letter, name, k, row in (("q", "Wq", j, j), ("k", "Wk", kvj, g), ("v", "Wv", kvj, g)):
        extra = learned if letter == "q" else shared
        out.append(Step(name, f"W_{k}^{letter}{extra}", getattr(result, name)[row], feat_d, feat_k, source))
        if f"b{letter}" in b:
            out.append(Step(f"b{letter}", f"b_{k}^{letter}: added to every row of {HY if letter != 'q' else 'H'} "
                            f"W_{k}^{letter}", b[f"b{letter}"][row][None], ["b"], feat_k, source))  # fmt: skip
    rope = result.rope_freq is not None
    norm = result.qk_norm is not None
    after = result.after_rope or {}
    q_name = "Q_projected" if norm or "temperature" in after else ("Q_pre_rope" if rope else "Q")
    k_name = "K_projected" if norm else ("K_pre_rope" if rope else "K")
    out += [
        Step(q_name, f"Q^[{j}] = H W_{j}^q{plus(j, 'q')}", p["Q_proj"][j], rows, feat_k, notes["Q"]),
        Step(k_name, f"K^[{kvj}] = {HY} W_{kvj}^k{plus(kvj, 'k')}", p["K_proj"][g], keys, feat_k, notes["K"]),
    ]
    if norm:
        over = "d_k, per head" if result.qk_norm["per_head"] else "the whole projection, all heads at once"
        gain = "(1 + g)" if result.qk_norm["offset"] else "g"
        out += [Step("Q_pre_rope" if rope else "Q", f"QK-norm: Q^[{j}] / sqrt(mean(Q^2) + eps) * {gain}^q, over {over}",
                     p["Q_pre_rope"][j], rows, feat_k),
                Step("K_pre_rope" if rope else "K", f"QK-norm: K^[{kvj}] / sqrt(mean(K^2) + eps) * {gain}^k",
                     p["K_pre_rope"][g], keys, feat_k)]  # fmt: skip
    if rope:
        rot = 2 * len(result.rope_freq)
        part = f" (the first {rot} of {dk} dimensions)" if rot < dk else ""
        q, k = ("Q_rotated", "K_rotated") if "l2_eps" in after else ("Q", "K")
        out += [Step(q, f"RoPE: q_p = q_p cos(p theta) + rotate_half(q_p) sin(p theta){part}", p[q][j], rows,
                     feat_k, "row p turned by angles p * theta_k; --query I shows them"),
                Step(k, f"RoPE: k_p = k_p cos(p theta) + rotate_half(k_p) sin(p theta){part}", p[k][g], keys,
                     feat_k)]  # fmt: skip
    if "l2_eps" in after:
        out += [Step("Q", f"L2 norm: q_p / sqrt(mean(q_p^2) + eps), no weight, eps = {after['l2_eps']:g}", p["Q"][j],
                     rows, feat_k),
                Step("K", "L2 norm: k_p / sqrt(mean(k_p^2) + eps)", p["K"][g], keys, feat_k)]  # fmt: skip
    if "temperature" in after:
        out.append(Step("Q", "temperature: q_p * (log(floor((p + 1) / floor_scale) + 1) attn_scale + 1), a NoPE "
                        "layer's queries sharper along the text", p["Q"][j], rows, feat_k))  # fmt: skip
    out.append(Step("V", f"V^[{kvj}] = {HY} W_{kvj}^v{plus(kvj, 'v')}", p["V"][g], keys, feat_k, notes["V"]))
    scale = f"S = Q^[{j}] K^[{kvj}]^T * scale, scale = {result.scale:.4g} = {scale_text}"
    if result.softcap:
        out += [Step("scores_uncapped", scale, raw, rows, keys, "before the soft-cap and the mask", grid=True),
                Step("scores", f"soft-cap: S = tanh(S / c) * c, c = {result.softcap:g}", S, rows, keys,
                     "before the mask", grid=True)]  # fmt: skip
    else:
        out.append(Step("scores", scale, S, rows, keys, "before the mask", grid=True))
    window = f", window n_c={model.window}" if model is not None and model.window else ""
    out += [
        Step("mask", f"Mask: 0 = may attend, -inf = may not{window}", result.mask, rows, keys, grid=True),
        Step("weights", "alpha = Softmax(S + Mask), row by row: each row sums to 1" if result.sink_logits is None else
             f"alpha = Softmax([S + Mask, s_{j}]) without the sink's column, s_{j} = {result.sink_logits[j]:.4g}: "
             "each row sums to 1 minus the sink's share", alpha, rows, keys, grid=True),
        Step("heads", f"head_{j} = alpha V^[{kvj}]: row i is a weighted sum of the rows of V", head_out, rows, feat_k),
        Step("concat", f"concat(head_0..head_{tau - 1}): every head's output side by side", concat, rows,
             numbered(tau * dk)),
        Step("Wo", "W^o", result.Wo, numbered(tau * dk), feat_d, source),
    ]  # fmt: skip
    if "bo" in b:
        out.append(Step("bo", "b^o: added to every row of concat(heads) W^o", b["bo"][None], ["b"], feat_d, source))
    out.append(Step("output", f"output = concat(heads) W^o{' + b^o' if 'bo' in b else ''}", output, rows, feat_d))
    return out
