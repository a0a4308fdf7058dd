"""Multi-head latent attention's tensors (Hugging Face's DeepSeek names), its parameter table in the notation, and
its weights as models.layers.mla uses them.

Roles per layer l: "l.q_a" (W^DQ), "l.q_anorm" (N_q), "l.q_b" (W^UQ), "l.q" (W^Q without a query latent),
"l.kv_a" (W^DKV), "l.kv_anorm" (N_kv), "l.kv_b" (W^UKV), "l.o" (W^O), each with ".w" and (W^DQ, W^DKV, W^O with
attention_bias) ".b".
"""

from __future__ import annotations

from qkv_cli.models.formats.config import ModelConfig, Param


def tensor_names(c: ModelConfig, p: str, r: str) -> dict[str, tuple[tuple[int, ...], str]]:
    """Layer prefix p ('layers.3.'), role prefix r ('3.') -> name: (shape, role)."""
    lt, d, tau, bias = c.latent, c.d, c.n_heads, c.attention.qkv_bias
    a = p + "self_attn."
    out = {}
    if lt.q_rank is None:
        out[a + "q_proj.weight"] = ((tau * lt.d_k, d), r + "q.w")
    else:
        out[a + "q_a_proj.weight"] = ((lt.q_rank, d), r + "q_a.w")
        if bias:
            out[a + "q_a_proj.bias"] = ((lt.q_rank,), r + "q_a.b")
        out[a + "q_a_layernorm.weight"] = ((lt.q_rank,), r + "q_anorm.w")
        out[a + "q_b_proj.weight"] = ((tau * lt.d_k, lt.q_rank), r + "q_b.w")
    out[a + "kv_a_proj_with_mqa.weight"] = ((lt.kv_rank + lt.d_rope, d), r + "kv_a.w")
    if bias:
        out[a + "kv_a_proj_with_mqa.bias"] = ((lt.kv_rank + lt.d_rope,), r + "kv_a.b")
    out[a + "kv_a_layernorm.weight"] = ((lt.kv_rank,), r + "kv_anorm.w")
    out[a + "kv_b_proj.weight"] = ((tau * (lt.d_nope + lt.d_v), lt.kv_rank), r + "kv_b.w")
    out[a + "o_proj.weight"] = ((d, tau * lt.d_v), r + "o.w")
    if bias:
        out[a + "o_proj.bias"] = ((d,), r + "o.b")
    return out


def parameter_table(c: ModelConfig) -> list[Param]:
    """MLA's matrices per layer, as DeepSeek-V2's paper names them."""
    lt, L, d, tau = c.latent, c.n_layers, c.d, c.n_heads
    bias = c.attention.qkv_bias
    out = []
    if lt.q_rank is None:
        out.append(Param("W_q", "W_j^Q", (d, lt.d_k), L * tau, "query projection of head j ([nope | rope] parts)"))
    else:
        out += [
            Param("W_dq", "W^DQ", (d, lt.q_rank), L, "query down-projection to the query latent c^Q (q_lora_rank)"),
            Param("q_a_norm", "gamma^Q", (lt.q_rank,), L, "RMSNorm of the query latent, scale"),
            Param("W_uq", "W_j^UQ", (lt.q_rank, lt.d_k), L * tau, "query up-projection of head j: [q^C | q^R]"),
        ]
        if bias:
            out.append(Param("b_dq", "b^DQ", (lt.q_rank,), L, "query down-projection bias"))
    out += [
        Param("W_dkv", "W^DKV", (d, lt.kv_rank + lt.d_rope), L,
              "down-projection to the latent c^KV (kv_lora_rank) and the shared RoPE key k^R"),
        Param("kv_a_norm", "gamma^KV", (lt.kv_rank,), L, "RMSNorm of the latent c^KV, scale"),
        Param("W_uk", "W_j^UK", (lt.kv_rank, lt.d_nope), L * tau, "key up-projection of head j (the nope part)"),
        Param("W_uv", "W_j^UV", (lt.kv_rank, lt.d_v), L * tau, "value up-projection of head j"),
        Param("W_o", "W^O", (tau * lt.d_v, d), L, "output projection of the concatenated heads"),
    ]  # fmt: skip
    if bias:
        out += [
            Param("b_dkv", "b^DKV", (lt.kv_rank + lt.d_rope,), L, "latent down-projection bias"),
            Param("b_o", "b^o", (d,), L, "output bias"),
        ]
    return out


def weights(get, c: ModelConfig, l: int, norm):
    """Layer l's LatentWeights. get(role) -> the tensor or None; norm(role) -> the Norm of that role."""
    from qkv_cli.models.layers.basic import Linear
    from qkv_cli.models.layers.mla import LATENT_NORM_EPS, LatentWeights, deinterleave

    lt, tau, r = c.latent, c.n_heads, f"{l}."

    def linear(role, W=None):
        return Linear(get(r + role + ".w") if W is None else W, get(r + role + ".b"), out_in=True)

    q_role = "q" if lt.q_rank is None else "q_b"
    Wq, Wkv_a, b_kv_a = get(r + q_role + ".w"), get(r + "kv_a.w"), get(r + "kv_a.b")
    if lt.interleaved:  # the RoPE rows as halves (layers.mla): each head's last d_rope rows of W^UQ, k^R's of W^DKV
        Wq = deinterleave(Wq, tau, lt.d_k, lt.d_rope)
        Wkv_a = deinterleave(Wkv_a, 1, lt.kv_rank + lt.d_rope, lt.d_rope)
        if b_kv_a is not None:
            b_kv_a = deinterleave(b_kv_a[:, None], 1, lt.kv_rank + lt.d_rope, lt.d_rope)[:, 0]
    q_norm = None
    if lt.q_rank is not None:
        q_norm = norm(r + "q_anorm")
        q_norm.eps = LATENT_NORM_EPS
    kv_norm = norm(r + "kv_anorm")
    kv_norm.eps = LATENT_NORM_EPS
    return LatentWeights(
        q_a=None if lt.q_rank is None else linear("q_a"),
        q_norm=q_norm,
        q_b=linear(q_role, Wq),
        kv_a=Linear(Wkv_a, b_kv_a, out_in=True),
        kv_norm=kv_norm,
        kv_b=linear("kv_b"),
        o=linear("o"),
        tau=tau,
        latent=lt,
    )
