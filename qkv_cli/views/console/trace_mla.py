"""`qkv explain` on multi-head latent attention (DeepSeek-V3, models.layers.mla): one head's steps, recomputed with the
plain formulas from H and the layer's matrices, and its score split into what a key says and where it is.

    c^Q = N_q(H W^DQ);  Q^[j] = c^Q W_j^UQ                 [c^KV | k^R] = H W^DKV;  c^KV <- N_kv(c^KV)
    K^[j] = concat(c^KV W_j^UK, k^R);  V^[j] = c^KV W_j^UV        RoPE on the last d_rope dimensions of Q^[j] and K^[j]
    S = (Q^C K^C^T + Q^R K^R^T) * scale                     the nope part plus the rope part
"""

from __future__ import annotations

import numpy as np

from qkv_cli.core import rope
from qkv_cli.views.console.trace_steps import Step, numbered


def rms(x, n):  # [m, r] -> [m, r]: x / sqrt(mean(x^2) + eps) * w
    return x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + n["eps"]) * n["w"]


def latent_projections(result) -> dict:
    """Every head's Q, K, V (and the latents) by the formulas of the module docstring."""
    lt, H = result.latent, result.H
    dn, r = lt["d_nope"], lt["kv_rank"]
    c_q = H if lt["W_dq"] is None else rms(H @ lt["W_dq"] + (0 if lt["b_dq"] is None else lt["b_dq"]), lt["q_norm"])
    Q = np.stack([c_q @ result.Wq[j] for j in range(result.tau)])  # (tau, m, d_nope + d_rope)
    a = H @ lt["W_dkv"] + (0 if lt["b_dkv"] is None else lt["b_dkv"])  # (m, r_kv + d_rope)
    c_kv, k_rope = rms(a[:, :r], lt["kv_norm"]), a[:, r:]
    K = np.stack([np.concatenate([c_kv @ result.Wk[j], k_rope], axis=1) for j in range(result.tau)])
    V = np.stack([c_kv @ result.Wv[j] for j in range(result.tau)])
    out = {"c_q": c_q, "c_kv": c_kv, "k_rope": k_rope, "Q_proj": Q, "K_proj": K, "V": V, "Q_pre_rope": Q,
           "K_pre_rope": K}  # fmt: skip
    if result.rope_freq is not None:
        cos, sin = rope.cos_sin(result.rope_freq, H.shape[0], result.rope_scaling, H.dtype)
        Q, K = Q.copy(), K.copy()
        Q[..., dn:], K[..., dn:] = rope.apply(Q[..., dn:], cos, sin), rope.apply(K[..., dn:], cos, sin)
    out["Q"], out["K"] = Q, K
    return out


def latent_steps(result, j: int, g: int, shared: str, p: dict, head, concat, output) -> list[Step]:
    """Steps for head j: H, the latents, Q and K before and after RoPE, V, the nope and rope parts of the scores,
    their sum, Mask, weights, head output, concat, W^O, output."""
    _, S, alpha, head_out = head
    lt, model = result.latent, result.model
    rows, keys = result.labels, result.key_labels
    dn, dr, dv, tau = lt["d_nope"], lt["d_rope"], lt["d_v"], result.tau
    feat_k, source = numbered(dn + dr), f"learned: {model.name} layer {model.layer}"
    scale = float(result.scale)
    out = [Step("H", "H: one row per token", result.H, rows, numbered(result.d),
                f"layer {model.layer}'s attention input: {model.attention_input}")]  # fmt: skip
    q_from = "H W_{j}^Q"
    if lt["W_dq"] is not None:
        out.append(Step("c_q", "c^Q = N_q(H W^DQ): the queries' latent", p["c_q"], rows, numbered(p["c_q"].shape[1]),
                        source))  # fmt: skip
        q_from = f"c^Q W_{j}^UQ"
    out += [
        Step("c_kv", f"c^KV = N_kv(H W^DKV): the latent ({lt['kv_rank']} numbers), what the KV cache holds",
             p["c_kv"], keys, numbered(lt["kv_rank"]), source),
        Step("k_rope", f"k^R = H W^KR: the RoPE key every head shares ({dr} numbers, cached)", p["k_rope"], keys,
             numbered(dr)),
        Step("Q_pre_rope", f"Q^[{j}] = {q_from} = concat(Q^C, Q^R): {dn} nope + {dr} rope dimensions",
             p["Q_pre_rope"][j], rows, feat_k),
        Step("K_pre_rope", f"K^[{j}] = concat(c^KV W_{j}^UK, k^R): the rope part shared by every head",
             p["K_pre_rope"][j], keys, feat_k),
    ]  # fmt: skip
    if result.rope_freq is not None:
        out += [Step("Q", f"RoPE on Q^R, the last {dr} of {dn + dr} dimensions (Q^C passes through)", p["Q"][j], rows,
                     feat_k, "row p turned by angles p * theta_k; --query I shows them"),
                Step("K", f"RoPE on k^R, the last {dr} of {dn + dr} dimensions", p["K"][j], keys, feat_k)]  # fmt: skip
    Qj, Kj = p["Q"][j], p["K"][j]
    nope = Qj[:, :dn] @ Kj[:, :dn].T * scale  # (m, d_nope) x (d_nope, n): what the keys say
    where = Qj[:, dn:] @ Kj[:, dn:].T * scale  # (m, d_rope) x (d_rope, n): where they are
    out += [
        Step("V", f"V^[{j}] = c^KV W_{j}^UV: d_v = {dv} wide (not d_k = {dn + dr})", p["V"][j], keys, numbered(dv)),
        Step("scores_nope", f"S^C = Q^C K^C^T * scale: the nope part, scale = {scale:.4g}", nope, rows, keys,
             grid=True),
        Step("scores_rope", "S^R = Q^R (k^R)^T * scale: the rope part", where, rows, keys, grid=True),
        Step("scores", f"S = S^C + S^R = Q^[{j}] K^[{j}]^T * scale", S, rows, keys, "before the mask", grid=True),
        Step("mask", "Mask: 0 = may attend, -inf = may not", result.mask, rows, keys, grid=True),
        Step("weights", "alpha = Softmax(S + Mask), row by row: each row sums to 1", alpha, rows, keys, grid=True),
        Step("heads", f"head_{j} = alpha V^[{j}]: row i is a weighted sum of the rows of V", head_out, rows,
             numbered(dv)),
        Step("concat", f"concat(head_0..head_{tau - 1}): every head's output side by side", concat, rows,
             numbered(tau * dv)),
        Step("Wo", "W^O", result.Wo, numbered(tau * dv), numbered(result.d), source),
    ]  # fmt: skip
    if "bo" in result.biases:
        out.append(Step("bo", "b^o: added to every row of concat(heads) W^O", result.bo[None], ["b"],
                        numbered(result.d), source))  # fmt: skip
    out.append(Step("output", f"output = concat(heads) W^O{' + b^o' if 'bo' in result.biases else ''}", output, rows,
                    numbered(result.d)))  # fmt: skip
    return out
