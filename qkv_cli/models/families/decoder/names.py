"""The tensor names of the RoPE decoders, in Hugging Face's naming, with their shapes and the role each one plays.

Roles: "embed", "final.w"/"final.b", and per layer l: "l.attn_in" (the norm before attention), "l.attn_out" (after
it, Gemma and OLMo 2), "l.mlp_in", "l.mlp_out", "l.qnorm"/"l.knorm" (QK-norm), "l.q", "l.k", "l.v", "l.o",
"l.qkv" (a fused projection: GPT-NeoX's rows per head [q_h | k_h | v_h], Phi-3's [Q | K | V]), "l.gate", "l.up",
"l.down", "l.gate_up" (Phi-3's fused [W_gate | W_up]) -- each with ".w" (weight) or ".b" (bias).
"""

from __future__ import annotations

from qkv_cli.models.families.decoder import mla as mla_names
from qkv_cli.models.families.decoder import moe as moe_config
from qkv_cli.models.formats.config import ModelConfig

# where each layout puts its norms: role -> Hugging Face module name
NORMS = {
    "llama": {"attn_in": "input_layernorm", "mlp_in": "post_attention_layernorm"},
    "gemma": {"attn_in": "input_layernorm", "attn_out": "post_attention_layernorm",
              "mlp_in": "pre_feedforward_layernorm", "mlp_out": "post_feedforward_layernorm"},
    "olmo2": {"attn_out": "post_attention_layernorm", "mlp_out": "post_feedforward_layernorm"},
    "neox": {"attn_in": "input_layernorm", "mlp_in": "post_attention_layernorm"},
}  # fmt: skip
HEAD = {"llama": "lm_head.weight", "neox": "embed_out.weight", "phi3": "lm_head.weight"}  # outside the model's prefix


def tensor_names(c: ModelConfig) -> dict[str, tuple[tuple[int, ...], str]]:
    """name (without the 'model.' or 'gpt_neox.' prefix) -> (shape, role)."""
    d, dff, V, tau, G, dk = c.d, c.d_ff, c.vocab_size, c.n_heads, c.n_kv_heads, c.d_k
    neox, phi3 = c.embeddings.names == "neox", c.embeddings.names == "phi3"
    layer_norm_bias = c.norms.biased
    out = {("embed_in.weight" if neox else "embed_tokens.weight"): ((V, d), "embed")}
    for l in range(c.n_layers):
        p, r = f"layers.{l}.", f"{l}."
        for role, module in NORMS[c.norms.layout].items():
            out[f"{p}{module}.weight"] = ((d,), f"{r}{role}.w")
            if layer_norm_bias:
                out[f"{p}{module}.bias"] = ((d,), f"{r}{role}.b")
        if c.latent is not None:  # multi-head latent attention: q_a, q_b, kv_a, kv_b and their norms
            out.update(mla_names.tensor_names(c, p, r))
        elif neox:
            out[p + "attention.query_key_value.weight"] = ((3 * d, d), r + "qkv.w")
            out[p + "attention.dense.weight"] = ((d, d), r + "o.w")
            if c.attention.qkv_bias:
                out[p + "attention.query_key_value.bias"] = ((3 * d,), r + "qkv.b")
                out[p + "attention.dense.bias"] = ((d,), r + "o.b")
        elif phi3:  # one matrix, rows [Q | K | V]: tau d_k + 2 G d_k
            out[p + "self_attn.qkv_proj.weight"] = (((tau + 2 * G) * dk, d), r + "qkv.w")
            out[p + "self_attn.o_proj.weight"] = ((d, tau * dk), r + "o.w")
        else:
            for x, rows in (("q", tau * dk), ("k", G * dk), ("v", G * dk)):
                out[f"{p}self_attn.{x}_proj.weight"] = ((rows, d), f"{r}{x}.w")
                if c.attention.qkv_bias:
                    out[f"{p}self_attn.{x}_proj.bias"] = ((rows,), f"{r}{x}.b")
            out[p + "self_attn.o_proj.weight"] = ((d, tau * dk), r + "o.w")
            if c.attention.o_bias:
                out[p + "self_attn.o_proj.bias"] = ((d,), r + "o.b")
        if c.attention.qk_norm:
            head = (
                c.attention.qk_norm == "head"
            )  # per head over d_k (Qwen 3, Gemma 3), or the whole projection (OLMo 2)
            out[p + "self_attn.q_norm.weight"] = ((dk if head else tau * dk,), r + "qnorm.w")
            out[p + "self_attn.k_norm.weight"] = ((dk if head else G * dk,), r + "knorm.w")
        if moe_config.is_moe(c, l):  # a router and E experts instead of one MLP
            out.update({p + name: spec for name, spec in moe_config.tensor_names(c, l).items()})
            continue
        mlp = (("dense_h_to_4h", "up", (dff, d)), ("dense_4h_to_h", "down", (d, dff))) if neox else (
            ("gate_up_proj", "gate_up", (2 * dff, d)), ("down_proj", "down", (d, dff))) if phi3 else (
            ("gate_proj", "gate", (dff, d)), ("up_proj", "up", (dff, d)), ("down_proj", "down", (d, dff)))  # fmt: skip
        mlp_name = "feed_forward" if c.embeddings.names == "llama4" else "mlp"
        for module, role, shape in mlp:
            out[f"{p}{mlp_name}.{module}.weight"] = (shape, f"{r}{role}.w")
            if c.mlp.bias:
                out[f"{p}{mlp_name}.{module}.bias"] = ((shape[0],), f"{r}{role}.b")
    final = "final_layer_norm" if neox else "norm"
    out[final + ".weight"] = ((d,), "final.w")
    if layer_norm_bias:
        out[final + ".bias"] = ((d,), "final.b")
    return out
