"""`qkv explain --query I`: one query's row of the formula, each number shown, and what RoPE did to it.

    Att(q_i, K, V) = Softmax(q_i K^T * scale + Mask_i) V:  each q_i . k_t, the scale, the mask entry, exp(s - max),
    the sum, the weights, and the head output as the weighted sum of the rows of V.
With RoPE: q_i and k_i before and after the rotation, and the angle i * theta_k of each pair (k, k + rot/2).
Multi-head latent attention: each q_i . k_t also as its nope part q^C . k^C plus its rope part q^R . k^R.
"""

from __future__ import annotations

import numpy as np

from qkv_cli.core.numerics import softcap_
from qkv_cli.errors import QkvError


def query_zoom(tr, i: int, result) -> dict:
    """Query i of the traced head: every number of its row (see the module docstring)."""
    m = tr["Q"].matrix.shape[0]
    if not 0 <= i < m:
        raise QkvError(f"--query {i} does not exist: queries are numbered 0..{m - 1} (the text has {m} tokens)")
    q = tr["Q"].matrix[i]
    K, V = tr["K"].matrix, tr["V"].matrix
    dots = K @ q  # q_i . k_t for every key t
    scaled = dots * result.scale
    capped = softcap_(scaled.copy(), result.softcap)
    mask = tr["mask"].matrix[i]
    score = capped + mask
    finite = score[np.isfinite(score)]
    sink = None if result.sink_logits is None else float(result.sink_logits[tr.head])  # gpt-oss: s_j
    top = float(finite.max()) if finite.size else 0.0
    if sink is not None:  # the max over [s_t, s_j]
        top = max(top, sink) if finite.size else sink
    e = np.where(np.isfinite(score), np.exp(np.where(np.isfinite(score), score, 0.0) - top), 0.0)
    sink_exp = 0.0 if sink is None else float(np.exp(sink - top))  # the sink's column: in the sum, then dropped
    total = float(e.sum()) + sink_exp
    alpha = e / total if total > 0 else np.zeros_like(e)
    terms = alpha[:, None] * V  # alpha_t v_t, one row per key
    out = {"query": i, "token": result.labels[i], "q": q, "scale": result.scale, "dot": dots, "scaled": scaled,
           "mask": mask, "score": score, "max": top, "exp": e, "sum": total, "weights": alpha, "V": V,
           "terms": terms, "output": terms.sum(axis=0)}  # fmt: skip
    if result.softcap:
        out["capped"] = capped
    if sink is not None:
        out.update(sink=sink, sink_exp=sink_exp, sink_share=sink_exp / total if total > 0 else 1.0)
    if result.latent is not None:  # multi-head latent attention: q_i . k_t = q^C . k^C + q^R . k^R
        dn = result.latent["d_nope"]
        out["dot_nope"], out["dot_rope"] = K[:, :dn] @ q[:dn], K[:, dn:] @ q[dn:]
    if result.rope_freq is not None:
        out["rope"] = rope_zoom(tr, i, result)
    return out


def rope_zoom(tr, i: int, result) -> dict:
    """What RoPE does at position i: pair (k, k + rot/2) turns by the angle i * theta_k."""
    p = tr.projections
    theta = np.asarray(result.rope_freq, dtype=np.float64)
    half = len(theta)
    j, g = tr.head, tr.kv_head
    first = 0 if result.latent is None else result.latent["d_nope"]  # MLA turns the last d_rope dimensions
    Q, K = p.get("Q_rotated", p["Q"]), p.get("K_rotated", p["K"])  # Llama 4 normalizes after RoPE
    return {"position": i, "pairs": [[first + k, first + k + half] for k in range(half)], "theta": theta,
            "angle": i * theta,
            "scaling": result.rope_scaling, "q_before": p["Q_pre_rope"][j, i], "q_after": Q[j, i],
            "k_before": p["K_pre_rope"][g, i], "k_after": K[g, i]}  # fmt: skip
