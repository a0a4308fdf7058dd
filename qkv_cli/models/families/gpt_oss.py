"""gpt-oss: the RoPE decoder with attention sinks and a mixture-of-experts MLP.

    attention   alpha_j = Softmax([Q K^T / sqrt(d_k) + Mask, s_j]) without its last column: head j's learned sink
                logit s_j takes a share of every row, so a row sums to 1 - share; biases on W^q, W^k, W^v, W^o
    layers      sliding (window n_c = sliding_window, 128) and full attention alternating, as `layer_types` says
    RoPE        YaRN (rope_parameters, `truncate` false in the released models)
    MLP         z = x W_r^T + b_r; the top-k logits, g = Softmax over those k (models.layers.moe's topk_softmax);
                MoE(x) = sum_j g_j FFN_e_j(x) with the clamped SwiGLU expert
                FFN_e(x) = ((clip(u, -limit, limit) + 1) * glu) W_down[e] + b_down[e],
                glu = min(g, limit) * sigmoid(alpha min(g, limit)),  [g | u] = x W_gate_up[e] + b_gate_up[e]
                where W_gate_up's columns interleave gate and up (g = columns 0, 2, 4 ...; u = 1, 3, 5 ...)

Everything else (norms, embedding, head, RoPE, masks, the streamed read of each layer) is the shared decoder's.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from qkv_cli.models.families.decoder import block as decoder
from qkv_cli.models.families.decoder import config as decoder_config
from qkv_cli.models.families.decoder import moe as moe_config
from qkv_cli.models.families.decoder import names as decoder_names
from qkv_cli.models.families.decoder import params as decoder_params
from qkv_cli.models.formats.config import ModelConfig, Param
from qkv_cli.models.layers.attention import AttentionWeights, self_attention
from qkv_cli.models.layers.basic import Linear
from qkv_cli.models.layers.moe import Moe, MoeLayer, sigmoid

BASE = decoder  # everything else: the shared RoPE decoder
MODEL_TYPE = "gpt_oss"
PREFIXES = ("model.", "")
SPEC = decoder_config.Spec(sliding="alternate", bias=("attention_bias", True), theta=("rope_theta", 150000.0))


def read_config(keys) -> dict:
    fields = decoder_config.read(keys, SPEC)
    with keys.located():
        moe = Moe(experts=keys.int("num_local_experts"), top_k=keys.int("num_experts_per_tok"),
                  router="topk_softmax", d_expert=fields["d_ff"])  # fmt: skip
        swiglu = (keys.number("swiglu_alpha", 1.702), keys.number("swiglu_limit", 7.0))
        mlp = replace(fields["mlp"], swiglu=swiglu, bias=True, moe=moe)
    return fields | {"attention": replace(fields["attention"], sinks=True), "mlp": mlp}


@dataclass
class ClampedSwiGLU:
    """gpt-oss's E experts, stored (in, out) as transformers keeps them; see the module docstring."""

    gate_up: np.ndarray  # [E, d, 2 d_e], columns [g_0, u_0, g_1, u_1 ...]
    gate_up_b: np.ndarray  # [E, 2 d_e]
    down: np.ndarray  # [E, d_e, d]
    down_b: np.ndarray  # [E, d]
    alpha: float
    limit: float

    def __call__(self, e: int, x):  # [r, d] -> [r, d]
        t = x.dtype.type
        gu = x @ self.gate_up[e] + self.gate_up_b[e]  # (r, d) x (d, 2 d_e) -> (r, 2 d_e)
        g = np.minimum(gu[:, ::2], t(self.limit))  # the gate, clamped from above
        u = np.clip(gu[:, 1::2], t(-self.limit), t(self.limit))  # the up projection, clamped both ways
        glu = g * sigmoid(g * t(self.alpha))
        return ((u + t(1)) * glu) @ self.down[e] + self.down_b[e]  # (r, d_e) x (d_e, d) -> (r, d)


@dataclass
class OssLayer:
    attn: AttentionWeights
    norms: dict  # "attn_in", "mlp_in" -> decoder.Norm
    sinks: np.ndarray  # [tau] s_j
    moe: MoeLayer  # the router W_r with its bias b_r, and the ClampedSwiGLU experts (moe_config.weights)


def tensor_names(c: ModelConfig) -> dict[str, tuple[tuple[int, ...], str]]:
    """The shared decoder's names without its dense MLP, plus each layer's sinks, router and experts."""
    dense = replace(c, mlp=replace(c.mlp, moe=None))  # the names of everything but the MLP: gpt-oss's own below
    out = {k: v for k, v in decoder_names.tensor_names(dense).items() if ".mlp." not in k}
    E, d, de = c.mlp.moe.experts, c.d, c.mlp.moe.d_expert
    for l in range(c.n_layers):
        p, r = f"layers.{l}.", f"{l}."
        out[p + "self_attn.sinks"] = ((c.n_heads,), r + "sinks")
        out[p + "mlp.router.weight"] = ((E, d), r + "router.w")
        out[p + "mlp.router.bias"] = ((E,), r + "router.b")
        out[p + "mlp.experts.gate_up_proj"] = ((E, d, 2 * de), r + "experts.gate_up.w")
        out[p + "mlp.experts.gate_up_proj_bias"] = ((E, 2 * de), r + "experts.gate_up.b")
        out[p + "mlp.experts.down_proj"] = ((E, de, d), r + "experts.down.w")
        out[p + "mlp.experts.down_proj_bias"] = ((E, d), r + "experts.down.b")
    return out


def tensor_shapes(c: ModelConfig) -> dict[str, tuple[int, ...]]:
    return {name: shape for name, (shape, _) in tensor_names(c).items()}


def fixed_keys(c: ModelConfig) -> list[str]:
    return [n for n, (_, role) in tensor_names(c).items() if role.startswith("final")]


def parameter_table(c: ModelConfig) -> list[Param]:
    """The decoder's table with the dense MLP replaced by the sinks, the router and the E experts."""
    L, d, E, de = c.n_layers, c.d, c.mlp.moe.experts, c.mlp.moe.d_expert
    dense = ("W_gate", "W_up", "W_down", "b_gate", "b_up", "b_down")
    plain = replace(c, mlp=replace(c.mlp, moe=None))  # the decoder's rows but the MLP's: gpt-oss's own below
    out = [p for p in decoder_params.parameter_table(plain) if p.name not in dense]
    at = next(i for i, p in enumerate(out) if p.name == "final_norm")
    out[at:at] = [
        Param("sinks", "s_j", (1,), L * c.n_heads, "sink logit of head j (a softmax column that is dropped)"),
        Param("W_router", "W_r", (d, E), L, "router: one logit per expert"),
        Param("b_router", "b_r", (E,), L, "router bias"),
        Param("W_gate_up", "W_gate_up", (d, 2 * de), L * E, "expert's gate and up columns, interleaved"),
        Param("b_gate_up", "b_gate_up", (2 * de,), L * E, "expert's gate and up bias"),
        Param("W_down", "W_down", (de, d), L * E, "expert's projection back to d"),
        Param("b_down", "b_down", (d,), L * E, "expert's output bias"),
    ]
    return out


def prepare(w, c: ModelConfig, dtype) -> decoder.Params:
    """As the shared decoder: each layer's block built on first use (models.formats.stream), experts included."""
    return decoder.prepare(w, c, dtype, tensor_names(c), prepare_block)


def prepare_block(w, c: ModelConfig, names: dict, l: int) -> OssLayer:
    p = f"{l}."

    def get(role):
        return w(names[p + role])

    qkv = Linear(np.concatenate([get(x + ".w") for x in "qkv"]), np.concatenate([get(x + ".b") for x in "qkv"]),
                 out_in=True)  # fmt: skip
    attn = AttentionWeights(qkv, Linear(get("o.w"), get("o.b"), out_in=True), c.n_heads, c.n_kv_heads, c.d_k)
    norms = {k: decoder.Norm(get(k + ".w"), None, c.norm_eps) for k in ("attn_in", "mlp_in")}
    alpha, limit = c.mlp.swiglu
    experts = ClampedSwiGLU(get("experts.gate_up.w"), get("experts.gate_up.b"), get("experts.down.w"),
                            get("experts.down.b"), alpha, limit)  # fmt: skip
    moe = moe_config.weights(lambda role: w(names[role]) if role in names else None, c, l, experts)
    return OssLayer(attn, norms, get("sinks"), moe)


def hooks(c: ModelConfig, layer: int, blk: OssLayer | None = None, m: int = 0, dtype=np.float64, start: int = 0):
    """The shared decoder's hooks (scale, YaRN RoPE) and the layer's sink logits."""
    return decoder.hooks(c, layer, None, m, dtype, start)._replace(sinks=None if blk is None else blk.sinks)


def block(p, c: ModelConfig, layer: int, x, mask, kernel, cache=None, start=0, values=None, into=None, rows=None):
    """h = x + Att(N_1(x)) (with sinks); x' = h + MoE(N_2(h)); as decoder.block for the arguments."""
    b = p.blocks[layer]
    h_ = hooks(c, layer, b, x.shape[0], x.dtype, start)._replace(values=values)
    parts = self_attention(b.norms["attn_in"](x), b.attn, h_, mask, kernel, cache, into, rows)
    h = x + parts.output
    f, routing = b.moe(b.norms["mlp_in"](h), c.mlp.moe)
    return h + f, parts._replace(routing=routing)  # the routing goes out with the attention's parts


def layer_extras(p, c: ModelConfig, layer: int, m: int, dtype) -> dict:
    """The decoder's (RoPE's frequencies), and the layer's sink logits s_j."""
    return decoder.layer_extras(p, c, layer, m, dtype) | {"sink_logits": p.blocks[layer].sinks}
