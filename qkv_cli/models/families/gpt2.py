"""GPT-2-family decoders: token + position embeddings, pre-LayerNorm blocks, causal attention, final LN.

x_0 = E[ids] + P[0..m-1]
block l:  H = LN_1(x);  x' = x + MultiHead(H) (causal Mask);  x'' = x' + W_2 gelu_new(W_1 LN_2(x') + b_1) + b_2
last:     LN_f(x_L)
Checkpoint matrices are Conv1D weights, already stored (in, out) = x @ W form; c_attn holds [W^q | W^k | W^v].
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from qkv_cli.core.masks import MaskSpec
from qkv_cli.models.formats.config import ModelConfig, Param, attention_params, layer_norm_mlp_params
from qkv_cli.models.layers.attention import AttentionWeights, Hooks, self_attention
from qkv_cli.models.layers.basic import ACTIVATIONS, Linear, layer_norm

MODEL_TYPE = "gpt2"
PREFIXES = ("transformer.", "")
ATTENTION_INPUT = "LN_1 of the layer input"


def read_config(keys) -> dict:
    """The config.json keys a GPT-2-family checkpoint uses."""
    d = keys.int("n_embd")
    return {
        "n_layers": keys.int("n_layer"),
        "n_heads": keys.int("n_head"),
        "d": d,
        "d_ff": keys.int("n_inner", 4 * d),
        "vocab_size": keys.int("vocab_size"),
        "max_positions": keys.int("n_positions"),
        "positions_key": "n_positions",
        "norm_eps": keys.number("layer_norm_epsilon", 1e-5),
        "activation": keys.str("activation_function", "gelu_new"),
        "scale_attn_weights": keys.bool("scale_attn_weights", True),
        "scale_by_layer": keys.bool("scale_attn_by_inverse_layer_idx", False),
    }


def parameter_table(c: ModelConfig) -> list[Param]:
    d = c.d
    ln1, ln2 = "LayerNorm before attention (pre-LN)", "LayerNorm before the feed-forward (pre-LN)"
    return [
        Param("wte", "E", (c.vocab_size, d), 1, "token vectors (one row per vocabulary id)"),
        Param("wpe", "P", (c.max_positions, d), 1, "learned position vectors"),
        *attention_params(c),
        *layer_norm_mlp_params(c, ln1, ln2),
        Param("ln_f_gamma", "gamma", (d,), 1, "final LayerNorm scale"),
        Param("ln_f_beta", "beta", (d,), 1, "final LayerNorm shift"),
    ]


def tensor_shapes(c: ModelConfig) -> dict[str, tuple[int, ...]]:
    """Every checkpoint tensor the forward pass reads (without the 'transformer.' prefix) -> its expected shape."""
    d, dff = c.d, c.d_ff
    shapes = {"wte.weight": (c.vocab_size, d), "wpe.weight": (c.max_positions, d)}
    for l in range(c.n_layers):
        p = f"h.{l}."
        shapes.update(
            {
                p + "ln_1.weight": (d,),
                p + "ln_1.bias": (d,),
                p + "attn.c_attn.weight": (d, 3 * d),
                p + "attn.c_attn.bias": (3 * d,),
                p + "attn.c_proj.weight": (d, d),
                p + "attn.c_proj.bias": (d,),
                p + "ln_2.weight": (d,),
                p + "ln_2.bias": (d,),
                p + "mlp.c_fc.weight": (d, dff),
                p + "mlp.c_fc.bias": (dff,),
                p + "mlp.c_proj.weight": (dff, d),
                p + "mlp.c_proj.bias": (d,),
            }
        )
    shapes.update({"ln_f.weight": (d,), "ln_f.bias": (d,)})
    return shapes


@dataclass
class Gpt2Layer:
    ln1: tuple[np.ndarray, np.ndarray]  # before attention
    attn: AttentionWeights
    ln2: tuple[np.ndarray, np.ndarray]  # before the feed-forward
    ffn1: Linear  # c_fc: d -> d_ff
    ffn2: Linear  # c_proj: d_ff -> d


@dataclass
class Params:
    E: np.ndarray  # (V, d) wte
    P: np.ndarray  # (P, d) wpe
    blocks: list[Gpt2Layer]
    ln_f: tuple[np.ndarray, np.ndarray]


def prepare(w, c: ModelConfig, dtype) -> Params:
    """Checkpoint tensors (prefix stripped) -> Params in `dtype` (Conv1D weights are already x @ W)."""

    v = w  # w(name): the tensor, cast to dtype (models.formats.safetensors.Tensors)

    def conv1d(name):
        return Linear(v(name + ".weight"), v(name + ".bias"), out_in=False)

    blocks = []
    for l in range(c.n_layers):
        p = f"h.{l}."
        blocks.append(
            Gpt2Layer(
                ln1=(v(p + "ln_1.weight"), v(p + "ln_1.bias")),
                attn=AttentionWeights(
                    conv1d(p + "attn.c_attn"), conv1d(p + "attn.c_proj"), c.n_heads, c.n_heads, c.d_k
                ),
                ln2=(v(p + "ln_2.weight"), v(p + "ln_2.bias")),
                ffn1=conv1d(p + "mlp.c_fc"),
                ffn2=conv1d(p + "mlp.c_proj"),
            )
        )
    return Params(E=v("wte.weight"), P=v("wpe.weight"), blocks=blocks, ln_f=(v("ln_f.weight"), v("ln_f.bias")))


def embed(params: Params, c: ModelConfig, ids, start: int = 0):  # [m] -> [m, d]
    """x_0 = E[ids] + P[start..start+m-1] (GPT-2 has no token types and no embedding LayerNorm)."""
    x = params.E[ids]  # (m, d), a new array
    x += params.P[start : start + len(ids)]
    return x


def layer_mask(c: ModelConfig, layer: int) -> MaskSpec:  # causal: query i sees keys 0..i
    return MaskSpec(causal=True)


def layer_type(c: ModelConfig, layer: int) -> str:
    return ""


def layer_extras(p, c: ModelConfig, layer: int, m: int, dtype) -> dict:  # no RoPE, no QK-norm
    return {}


def hooks(c: ModelConfig, layer: int) -> Hooks:  # the scale: 1/sqrt(d_k), optionally / (layer + 1)
    s = 1 / math.sqrt(c.d_k) if c.scale_attn_weights else 1.0
    return Hooks(scale=s / (layer + 1) if c.scale_by_layer else s)


def block(p: Params, c: ModelConfig, layer: int, x, mask, kernel, cache=None, start=0, values=None, into=None,
          rows=None, edit=None):  # fmt: skip
    """Pre-LN: x' = x + MultiHead(LN_1(x)); x'' = x' + FFN(LN_2(x')). With a KV cache, x holds the new tokens.
    edit(point, value) -> value: reads or replaces "attn", "mlp" and the attention's points (pipeline.patch)."""
    b = p.blocks[layer]
    H = layer_norm(x, *b.ln1, c.norm_eps)  # the attention's input
    h = hooks(c, layer)._replace(values=values, edit=edit)
    parts = self_attention(H, b.attn, h, mask, kernel, cache, into, rows)
    x = (parts.output if edit is None else edit("attn", parts.output)) + x
    h = layer_norm(x, *b.ln2, c.norm_eps)
    f = ACTIVATIONS[c.activation](b.ffn1(h))  # (m, d) x (d, d_ff) -> (m, d_ff)
    out = b.ffn2(f)  # (m, d_ff) x (d_ff, d) -> (m, d)
    if edit is not None:
        out = edit("mlp", out)
    out += x
    return out, parts


def final(p: Params, c: ModelConfig, x):  # [m, d] -> [m, d]: LN_f
    return layer_norm(x, *p.ln_f, c.norm_eps)


def logits(p: Params, c: ModelConfig, h):  # [m, d] after LN_f -> [m, V]: the output head is E itself (tied)
    return h @ p.E.T
