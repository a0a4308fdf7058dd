"""The RoPE decoder every modern family is an arrangement of: Llama, Mistral, Qwen 2/3, Gemma 2/3, GPT-NeoX, OLMo 2,
SmolLM3, Phi-3, DeepSeek-V3.

    x_0 = E[ids] (* sqrt(d) for Gemma)
    block l (pre-norm, Llama):  h = x + Att(N_1(x));  x' = h + MLP(N_2(h))
            (Gemma 2/3):        h = x + N_post(Att(N_1(x)));  x' = h + N_post2(MLP(N_2(h)))
            (OLMo 2):           h = x + N_post(Att(x));  x' = h + N_post2(MLP(h))
            (GPT-NeoX):         x' = MLP(N_2(x)) + Att(N_1(x)) + x          (parallel residual)
    Att: Q, K, V with G key/value heads [QK-norm] [RoPE] Softmax(Q K^T * scale [soft-capped] + Mask) V, W^o
    MLP: W_down (act(W_gate x) * W_up x) (gated), or W_2 act(W_1 x + b_1) + b_2 (GPT-NeoX),
         or a mixture of experts (models.layers.moe: Mixtral, Qwen3-MoE, OLMoE, DeepSeek, Llama 4; a shared expert, a
         correction bias, dense first layers: options of moe.Moe), its routing kept in the layer's parts
         (DeepSeek-V3: multi-head latent attention, K and V decompressed from one latent per token: models.layers.mla)
    last: N_f(x_L)

What differs between families is a named, typed option of ModelConfig (models.layers.choices: attention, rope, mlp,
norms, embeddings), read by decoder_config from each family module's Spec; nothing here tests a family's name.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING

import numpy as np

from qkv_cli.core.masks import MaskSpec
from qkv_cli.models.families.decoder import mla as mla_names
from qkv_cli.models.families.decoder import moe as moe_config
from qkv_cli.models.families.decoder.names import tensor_names
from qkv_cli.models.families.decoder.params import parameter_table as parameter_table
from qkv_cli.models.formats.config import ModelConfig
from qkv_cli.models.layers import attention, rope
from qkv_cli.models.layers.attention import AttentionWeights, Hooks, self_attention
from qkv_cli.models.layers.basic import ACTIVATIONS, IN_PLACE, Linear, layer_norm, rms_norm
from qkv_cli.models.layers.mla import latent_attention
from qkv_cli.models.layers.moe import MoeLayer

if TYPE_CHECKING:
    from qkv_cli.models.formats.stream import RowMatrix

STREAMED = True  # prepare reads each layer as the pass reaches it (models.formats.stream)
ATTENTION_INPUT = "the layer input after its first norm (N_1)"  # OLMo 2 says its own (olmo2.py)
HEAD = "lm_head.weight"  # the output head, outside the model's prefix; absent or tied: E


@dataclass
class Norm:
    """RMSNorm (offset 1 for Gemma, whose checkpoints store w - 1) or LayerNorm (GPT-NeoX, with a bias)."""

    w: np.ndarray
    b: np.ndarray | None
    eps: float
    offset: float = 0.0

    def __call__(self, x):  # [.., n] -> [.., n]
        if self.b is not None:
            return layer_norm(x, self.w, self.b, self.eps)
        return rms_norm(x, self.w, self.eps, self.offset)


@dataclass
class DecoderLayer:
    attn: AttentionWeights  # or models.layers.mla.LatentWeights (multi-head latent attention)
    norms: dict  # "attn_in", "attn_out", "mlp_in", "mlp_out", "qnorm", "knorm" -> Norm (absent: not used)
    up: Linear | None  # d -> d_ff (None: a MoE layer)
    gate: Linear | None  # d -> d_ff (gated MLP), or None
    down: Linear | None  # d_ff -> d
    moe: MoeLayer | None = None  # a mixture of experts instead of up, gate and down


@dataclass
class Params:
    E: RowMatrix  # (V, d) token embeddings, read by rows
    blocks: Sequence[DecoderLayer]  # models.formats.stream.Layers: layer l built on first use
    final: Norm
    head: RowMatrix | None  # (V, d) output matrix W_out (tied: E); None: the checkpoint has none


def layer_type(c: ModelConfig, layer: int) -> str:
    types = c.attention.layer_types
    return types[layer] if types else ""


def layer_mask(c: ModelConfig, layer: int) -> MaskSpec:
    """Causal; a sliding layer also keeps only the n_c most recent keys (0 <= i - t < sliding_window), a chunked
    one only the keys of the query's own chunk (t // n_ch = i // n_ch, Llama 4)."""
    kind = layer_type(c, layer)
    window = c.attention.sliding_window if kind == "sliding_attention" else None
    chunk = c.attention.chunk_size if kind == "chunked_attention" else None
    return MaskSpec(causal=True, window=window, chunk=chunk)


def rope_of(c: ModelConfig, layer: int) -> rope.Rope | None:
    """The layer's RoPE: Gemma 3's sliding layers have a base of their own; SmolLM3's NoPE layers have none."""
    return c.rope.of(layer_type(c, layer), layer)


def hooks(
    c: ModelConfig, layer: int, blk: DecoderLayer | None = None, m: int = 0, dtype=np.float64, start: int = 0
) -> Hooks:
    """The attention hooks of a layer: scale, RoPE at positions start..start+m-1, QK-norm and soft-capping."""
    rotate = None
    if m and rope_of(c, layer) is not None:
        cos, sin = rope.cos_sin(rope_of(c, layer), m, dtype, start)
        rotate = partial(rope.apply, cos=cos, sin=sin)
    norm_q = norm_k = None
    if blk is not None and "qnorm" in blk.norms:
        norm_q, norm_k = blk.norms["qnorm"], blk.norms["knorm"]
    per_head = c.attention.qk_norm == "head"
    after = None  # Llama 4: the L2 norm of Q and K on RoPE layers, the query temperature on NoPE layers
    if c.attention.l2_qk_norm and rotate is not None:
        after = partial(attention.l2_norm_qk, eps=c.norm_eps)
    elif c.attention.temperature and m and rope_of(c, layer) is None:
        after = attention.tempered_queries(m, start, *c.attention.temperature, dtype)
    return Hooks(
        scale=c.attention.scale,
        qk_norm=(lambda Q, K: (norm_q(Q), norm_k(K))) if per_head and norm_q else None,
        qk_norm_flat=(lambda q, k: (norm_q(q), norm_k(k))) if not per_head and norm_q else None,
        rotate=rotate,
        softcap=c.attention.softcap,
        after_rope=after,
    )


def layer_extras(p: Params, c: ModelConfig, layer: int, m: int, dtype) -> dict:
    """What explain needs to redo the layer's steps: RoPE's frequencies at this length, the QK-norm weights."""
    r = rope_of(c, layer)
    freq, scaling = rope.inv_freq(r, m, dtype) if r is not None else (None, None)
    out = {"rope_freq": freq, "rope_scaling": scaling}
    if c.attention.l2_qk_norm and r is not None:  # Llama 4's steps after RoPE (hooks)
        out["after_rope"] = {"l2_eps": c.norm_eps}
    elif c.attention.temperature and r is None:
        out["after_rope"] = {"temperature": attention.query_temperature(m, 0, *c.attention.temperature, dtype)}
    n = p.blocks[layer].norms
    if "qnorm" in n:
        out["qk_norm"] = {"q": n["qnorm"].w, "k": n["knorm"].w, "eps": n["qnorm"].eps, "offset": n["qnorm"].offset,
                          "per_head": c.attention.qk_norm == "head"}  # fmt: skip
    if c.latent is not None:  # multi-head latent attention: its latents' matrices and norms
        out["latent"] = p.blocks[layer].attn.steps()
    return out


def tensor_shapes(c: ModelConfig) -> dict[str, tuple[int, ...]]:
    """Every tensor the forward pass reads (without the family's prefix) -> its shape."""
    return {name: shape for name, (shape, _) in tensor_names(c).items()}


def prepare(w, c: ModelConfig, dtype, tensors=None, build=None) -> Params:
    """The checkpoint's tensors as the forward pass reads them: each layer's block built on first use (formats.stream:
    read, cast, kept while the budget allows), the embedding and the head read by rows. tensors, build: a family's
    own tensor names (name -> (shape, role)) and block builder (Llama 4's experts)."""
    from qkv_cli.models.formats.stream import Layers, RowMatrix, reused

    names = {role: name for name, (_, role) in (tensors or tensor_names(c)).items()}
    itemsize = np.dtype(dtype).itemsize
    per_layer = [[n for role, n in names.items() if role.startswith(f"{l}.")] for l in range(c.n_layers)]
    layer_bytes = [w.nbytes(itemsize, k) for k in per_layer]
    read = reused(w, dtype, 2 * max(layer_bytes, default=0))  # the layers' tensors into buffers reused layer to layer
    build = partial(build or prepare_block, read, c, names)
    blocks = Layers(build, c.n_layers, layer_bytes)
    E = RowMatrix(w, names["embed"], (c.vocab_size, c.d), dtype)
    if "__head__" in w:
        head = RowMatrix(w, "__head__", (c.vocab_size, c.d), dtype)
    else:
        head = E if c.embeddings.tied else None
    return Params(E, blocks, _norm(w, c, names, "final"), head)


def fixed_keys(c: ModelConfig) -> list[str]:
    """The tensors outside the layers, the embedding and the head (the final norm): read at load, always held."""
    return [n for n, (_, role) in tensor_names(c).items() if role.startswith("final")]


def _norm(w, c: ModelConfig, names: dict, role: str) -> Norm | None:
    if role + ".w" not in names:
        return None
    b = w(names[role + ".b"]) if role + ".b" in names else None
    return Norm(w(names[role + ".w"]), b, c.norm_eps, c.norms.offset)


def prepare_block(w, c: ModelConfig, names: dict, l: int, experts=None) -> DecoderLayer:
    """Layer l's tensors, cast, in the shapes the forward pass uses ([W^q | W^k | W^v] fused); a MoE layer's router,
    experts and shared expert(s) as moe_config.weights reads them. experts(get, l): a family's own experts (Llama
    4's stacked ones)."""
    tau, dk = c.n_heads, c.d_k
    p = f"{l}."

    def get(role):
        return w(names[role]) if role in names else None

    def linear(role):
        return Linear(get(role + ".w"), get(role + ".b"), out_in=True)

    if c.latent is not None:  # multi-head latent attention (models.layers.mla)
        attn = mla_names.weights(get, c, l, lambda role: _norm(w, c, names, role))
    elif p + "qkv.w" in names and c.embeddings.names == "phi3":  # Phi-3: one matrix, already [Q | K | V]
        qkv = linear(p + "qkv")
    elif p + "qkv.w" in names:  # GPT-NeoX: one matrix, rows per head [q_h | k_h | v_h]: regroup as [Q | K | V]
        W = get(p + "qkv.w").reshape(tau, 3, dk, -1).transpose(1, 0, 2, 3).reshape(3 * tau * dk, -1)
        b = get(p + "qkv.b")
        qkv = Linear(
            np.ascontiguousarray(W),
            None if b is None else b.reshape(tau, 3, dk).transpose(1, 0, 2).ravel(),
            out_in=True,
        )
    else:
        bias = [get(p + x + ".b") for x in "qkv"]
        qkv = Linear(
            _joined(w, [names[p + x + ".w"] for x in "qkv"]),  # [W^q; W^k; W^v]: (tau + 2 G) d_k rows
            None if bias[0] is None else np.concatenate(bias),
            out_in=True,
        )
    up = gate = None  # a MoE layer has neither
    if p + "gate_up.w" in names:  # Phi-3: [W_gate | W_up] stacked by rows (d_ff each): views, no copy
        W, dff = get(p + "gate_up.w"), c.d_ff
        gate, up = Linear(W[:dff], None, out_in=True), Linear(W[dff:], None, out_in=True)
    elif p + "up.w" in names:
        up, gate = linear(p + "up"), linear(p + "gate") if p + "gate.w" in names else None
    roles = ("attn_in", "attn_out", "mlp_in", "mlp_out", "qnorm", "knorm")
    norms = {k: n for k in roles if (n := _norm(w, c, names, p + k))}
    if c.latent is None:
        attn = AttentionWeights(qkv, linear(p + "o"), tau, c.n_kv_heads, dk)
    if p + "router.w" in names:  # a mixture of experts instead of the MLP
        moe = moe_config.weights(get, c, l, None if experts is None else experts(get, l))
        return DecoderLayer(attn, norms, None, None, None, moe)
    return DecoderLayer(attn, norms, up, gate, linear(p + "down"))


def _joined(w, keys):  # [k_i, d] each -> [sum k_i, d]
    """The tensors' rows one after the other: written in place into a reused buffer by formats.stream.Reused."""
    from qkv_cli.models.formats.stream import Reused

    return w.join(keys) if isinstance(w, Reused) else np.concatenate([w(key) for key in keys])


def embed(p: Params, c: ModelConfig, ids, start: int = 0):  # [m] -> [m, d] (RoPE: positions enter later)
    """E[ids], column-major: the products (W x^T)^T come out column-major, and the residual sums x + a of arrays
    laid out alike run along contiguous memory (a row-major x plus a column-major a is a strided loop)."""
    x = np.asfortranarray(p.E.rows(ids))  # (m, d): only the rows of ids are read
    if c.embeddings.scale:
        x *= x.dtype.type(c.embeddings.scale)  # Gemma: E[ids] * sqrt(d), the factor rounded to the dtype
    return x


def block(p: Params, c: ModelConfig, layer: int, x, mask, kernel, cache=None, start=0, values=None, into=None,
          rows=None, edit=None):  # fmt: skip
    """One layer ([m, d] -> [m, d], parts); with a KV cache, x holds the new tokens only (at positions start..) and
    the cache the others. values: a function that changes V before the weights use it (value zeroing). into: a
    zero-filled array for the attention weights. rows (r0, r1): keep only those queries' weights. edit(point,
    value) -> value: reads or replaces "attn" and "mlp" (each sub-layer's output, after its own norm) and the
    attention's points (Hooks.edit; pipeline.patch)."""
    b = p.blocks[layer]
    n = b.norms
    act = ACTIVATIONS[c.activation]
    a_in = n["attn_in"](x) if "attn_in" in n else x
    h = hooks(c, layer, b, x.shape[0], x.dtype, start)._replace(values=values, edit=edit)
    attend = self_attention if c.latent is None else latent_attention
    parts = attend(a_in, b.attn, h, mask, kernel, cache, into, rows)
    a = n["attn_out"](parts.output) if "attn_out" in n else parts.output
    if edit is not None:
        a = edit("attn", a)
    if c.mlp.parallel_residual:  # GPT-NeoX: both branches read x
        f = b.down(act(b.up(n["mlp_in"](x))))
        return ((f if edit is None else edit("mlp", f)) + a) + x, parts
    h = x + a
    f_in = n["mlp_in"](h) if "mlp_in" in n else h
    if b.moe is not None:  # sum_j g_ij FFN_top_ij(x_i): the routing goes out with the attention's parts
        f, routing = b.moe(f_in, c.mlp.moe)
        parts = parts._replace(routing=routing)
    elif b.gate is not None:  # act(W_gate x) * W_up x, computed in the fresh gate product (one temporary, not three)
        g = b.gate(f_in)
        g = IN_PLACE[c.activation](g) if c.activation in IN_PLACE else act(g)
        g *= b.up(f_in)
        f = b.down(g)
    else:
        f = b.down(act(b.up(f_in)))
    f = n["mlp_out"](f) if "mlp_out" in n else f
    if edit is not None:
        f = edit("mlp", f)
    return h + f, parts


def final(p: Params, c: ModelConfig, x):  # [m, d] -> [m, d]
    return p.final(x)


def logits(p: Params, c: ModelConfig, h):  # [m, d] after the final norm -> [m, V]
    """h W_out^T: one score per vocabulary entry (Gemma 2 soft-caps them: tanh(z / c) c)."""
    if p.head is None:
        return None
    z = p.head.scores(h)  # h W_out^T: (m, d) x (d, V) -> (m, V)
    if c.embeddings.final_softcap:
        from qkv_cli.core.numerics import softcap_

        softcap_(z, c.embeddings.final_softcap)
    return z
