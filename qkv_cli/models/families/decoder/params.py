"""The parameter table of a RoPE decoder, in the notation, from its config (counted like its tensors)."""

from __future__ import annotations

from qkv_cli.models.families.decoder import mla as mla_names
from qkv_cli.models.families.decoder.names import NORMS
from qkv_cli.models.formats.config import ModelConfig, Param, attention_params

NORM_MEANING = {
    "attn_in": "norm before attention (N_1)",
    "attn_out": "norm after attention",
    "mlp_in": "norm before the MLP (N_2)",
    "mlp_out": "norm after the MLP",
}


def parameter_table(c: ModelConfig) -> list[Param]:
    L, d, dff, dk = c.n_layers, c.d, c.d_ff, c.d_k
    bias = c.norms.biased
    out = [Param("embed_tokens", "E", (c.vocab_size, d), 1, "token vectors (one row per vocabulary id)")]
    if c.latent is not None:  # multi-head latent attention
        out += mla_names.parameter_table(c)
    else:
        out += attention_params(c, biases=c.attention.qkv_bias, output_bias=c.attention.o_bias)
    if c.attention.qk_norm:
        head = c.attention.qk_norm == "head"
        out += [
            Param("q_norm", "g^q", (dk if head else c.n_heads * dk,), L, "QK-norm scale of the queries"),
            Param("k_norm", "g^k", (dk if head else c.n_kv_heads * dk,), L, "QK-norm scale of the keys"),
        ]
    for role in NORMS[c.norms.layout]:
        out.append(Param(f"{role}_norm", "gamma", (d,), L, NORM_MEANING[role] + ", scale"))
        if bias:
            out.append(Param(f"{role}_norm_b", "beta", (d,), L, NORM_MEANING[role] + ", shift"))
    gated, moe = c.mlp.gated, c.mlp.moe
    L_moe = 0 if moe is None else L - len(moe.dense_layers)  # layers with experts; the others a dense MLP
    if moe is not None:
        out += moe_params(c, L_moe)
    dense = L - L_moe
    if gated and dense:
        out.append(Param("W_gate", "W_gate", (d, dff), dense, "MLP gate (act(x W_gate) * x W_up)"))
    out += [
        Param("W_up", "W_up" if gated else "W_1", (d, dff), dense, "MLP expansion"),
        Param("W_down", "W_down" if gated else "W_2", (dff, d), dense, "MLP projection back to d"),
    ] if dense else []  # fmt: skip
    if c.mlp.bias:
        out += [
            Param("b_up", "b_1", (dff,), L, "MLP expansion bias"),
            Param("b_down", "b_2", (d,), L, "MLP output bias"),
        ]
        if gated:
            out.append(Param("b_gate", "b_gate", (dff,), L, "MLP gate bias"))
    out.append(Param("final_norm", "gamma_f", (d,), 1, "final norm, scale"))
    if bias:
        out.append(Param("final_norm_b", "beta_f", (d,), 1, "final norm, shift"))
    if not c.embeddings.tied:
        out.append(Param("lm_head", "W_out", (d, c.vocab_size), 1, "output head (untied from E)"))
    return out


def moe_params(c: ModelConfig, L: int) -> list[Param]:
    """A mixture of experts' router (and its correction bias), its E experts and its shared expert(s) in each of its
    L layers."""
    o, d = c.mlp.moe, c.d
    E, de, ds = o.experts, o.d_expert, o.d_shared
    out = [Param("W_router", "W_r", (d, E), L, f"router: one logit per expert (top {o.top_k} of {E} chosen per token)")]
    if o.correction:
        out.append(Param("b_corr", "b_corr", (E,), L, "router correction bias (steers the choice only)"))
    out += [
        Param("W_gate_experts", "W_gate[e]", (d, de), L * E, "expert MLP gate, per expert"),
        Param("W_up_experts", "W_up[e]", (d, de), L * E, "expert MLP expansion, per expert"),
        Param("W_down_experts", "W_down[e]", (de, d), L * E, "expert MLP projection back to d, per expert"),
    ]
    if ds:
        out += [
            Param("W_gate_shared", "W_gate^s", (d, ds), L, "shared expert(s) gate (every token)"),
            Param("W_up_shared", "W_up^s", (d, ds), L, "shared expert(s) expansion"),
            Param("W_down_shared", "W_down^s", (ds, d), L, "shared expert(s) projection back to d"),
        ]
    return out
