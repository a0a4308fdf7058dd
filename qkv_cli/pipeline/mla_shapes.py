"""`qkv shapes --model` on multi-head latent attention (DeepSeek-V3, models.layers.mla): the matrices of one layer, the
latent, and what caching the latent saves against caching every head's K and V.

    c^Q = N_q(H W^DQ)   Q_j = [c^Q W_j^UQ, RoPE on its last d_rope]      (m, d_nope + d_rope)
    [c^KV | k^R] = H W^DKV                                               (m, r_kv + d_rope): the cache
    K_j = [N_kv(c^KV) W_j^UK | RoPE(k^R)],  V_j = N_kv(c^KV) W_j^UV      (n, d_nope + d_rope), (n, d_v)
"""

from __future__ import annotations

from qkv_cli.core.shapes import Matrix, scores_formula


def latent_matrices(c, m: int, input_meaning: str) -> list[Matrix]:
    """Every matrix of one MLA layer for m tokens; per-head matrices give one head's shape and count = tau."""
    lt, d, tau = c.latent, c.d, c.n_heads
    dk, dv, r, dr = lt.d_k, lt.d_v, lt.kv_rank, lt.d_rope
    S = scores_formula(dk, c.attention.scale, c.attention.softcap, tight=True)
    out = [Matrix("H", "H", m, d, 1, 0, 0, input_meaning)]
    if lt.q_rank is None:
        out.append(Matrix("W_q", "W_j^Q", d, dk, tau, tau * d * dk, 0, "query projection of head j"))
        q_from, q_width = "H W_j^Q", d
    else:
        rq = lt.q_rank
        out += [
            Matrix("W_dq", "W^DQ", d, rq, 1, d * rq, 0, "query down-projection (q_lora_rank)"),
            Matrix("c_q", "c^Q = N_q(H W^DQ)", m, rq, 1, 0, 2 * m * d * rq, "the queries' latent"),
            Matrix("W_uq", "W_j^UQ", rq, dk, tau, tau * rq * dk, 0, "query up-projection of head j"),
        ]
        q_from, q_width = "c^Q W_j^UQ", rq
    out += [
        Matrix("W_dkv", "W^DKV", d, r + dr, 1, d * (r + dr), 0, "down-projection to the latent and the RoPE key"),
        Matrix("c_kv", "c^KV = N_kv(H W^DKV)", m, r, 1, 0, 2 * m * d * r,
               "the latent (kv_lora_rank): what the KV cache holds"),
        Matrix("k_rope", "k^R = RoPE(H W^KR)", m, dr, 1, 0, 2 * m * d * dr,
               "the RoPE key every head shares (cached)"),
        Matrix("W_uk", "W_j^UK", r, lt.d_nope, tau, tau * r * lt.d_nope, 0, "key up-projection of head j (nope)"),
        Matrix("W_uv", "W_j^UV", r, dv, tau, tau * r * dv, 0, "value up-projection of head j"),
        Matrix("Q", f"Q^[j] = {q_from}", m, dk, tau, 0, tau * 2 * m * q_width * dk,
               f"queries of head j: {lt.d_nope} nope + {dr} rope"),
        Matrix("K", "K^[j] = [c^KV W_j^UK | k^R]", m, dk, tau, 0, tau * 2 * m * r * lt.d_nope,
               "keys of head j, decompressed"),
        Matrix("V", "V^[j] = c^KV W_j^UV", m, dv, tau, 0, tau * 2 * m * r * dv, "values of head j, decompressed"),
        Matrix("scores", f"S = {S}", m, m, tau, 0, tau * (2 * m * m * dk + m * m),
               "scaled scores: q^C . k^C + q^R . k^R"),
        Matrix("mask", "Mask", m, m, 1, 0, tau * m * m, "0 = may attend, -inf = may not"),
        Matrix("weights", "alpha = Softmax(S+Mask)", m, m, tau, 0, tau * 4 * m * m, "attention weights"),
        Matrix("head_output", "alpha V^[j]", m, dv, tau, 0, tau * 2 * m * m * dv, "output of head j (d_v wide)"),
        Matrix("concat", "concat(heads)", m, tau * dv, 1, 0, 0, "heads side by side"),
        Matrix("W_o", "W^O", tau * dv, d, 1, tau * dv * d, 0, "output projection"),
        Matrix("output", "concat W^O", m, d, 1, 0, 2 * m * tau * dv * d, "multi-head output"),
    ]  # fmt: skip
    return out


def cache_numbers(c) -> dict:
    """Numbers a KV cache holds per token and layer: MLA's latent and RoPE key, against every head's K and V."""
    lt, tau = c.latent, c.n_heads
    mha = tau * (lt.d_k + lt.d_v)
    return {"latent": lt.kv_rank, "rope_key": lt.d_rope, "mla": lt.cached, "mha": mha, "ratio": mha / lt.cached}


def cache_lines(c, itemsize: int, m: int) -> list[str]:
    """What caching the latent saves, per token and layer and for the whole model."""
    lt, tau, L = c.latent, c.n_heads, c.n_layers
    n = cache_numbers(c)
    per_token = L * n["mla"] * itemsize
    return [
        f"KV cache (multi-head latent attention): per token and layer the latent c^KV (r_kv={lt.kv_rank}) and the "
        f"RoPE key k^R (d_rope={lt.d_rope}): {n['mla']:,} numbers; multi-head attention caching K and V of every "
        f"head would hold tau x (d_k + d_v) = {tau} x ({lt.d_k} + {lt.d_v}) = {n['mha']:,} ({n['ratio']:.1f}x more)",
        f"KV cache: L={L} x {n['mla']:,} x {itemsize} bytes = {per_token:,} bytes per token over all layers "
        f"(instead of {L * n['mha'] * itemsize:,}); {m * per_token:,} bytes for m={m} tokens",
    ]
