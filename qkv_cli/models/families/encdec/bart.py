"""BART (Lewis et al. 2020): an encoder-decoder with learned positions (offset 2) and post-norm layers.

x_0 = LN_emb(E[ids] * embed_scale + P[2 + 0..m-1])      embed_scale: sqrt(d) with scale_embedding, else 1
x <- LN(x + Attention(x))   scores = Q K^T / sqrt(d_k)   (post-norm, biases on every projection)
x <- LN(x + W_2 gelu(W_1 x + b_1) + b_2)
logits = X E^T + final_logits_bias
"""

from __future__ import annotations

import math

from qkv_cli.errors import QkvError
from qkv_cli.models.families.encdec.config import EncDecOptions
from qkv_cli.models.formats.config import Param
from qkv_cli.models.layers import encdec as BASE
from qkv_cli.models.layers.basic import Linear
from qkv_cli.models.layers.encdec import FeedForward, Layer, Norm, Options, Params, Projections, Stack

MODEL_TYPE = "bart"
PREFIXES = ("",)  # saved by BartForConditionalGeneration: model.* and final_logits_bias
ATTENTION_INPUT = "the layer input"
ACTIVATIONS = {"gelu": "gelu", "gelu_new": "gelu_new", "relu": "relu", "silu": "silu", "swish": "silu"}
POSITION_OFFSET = 2  # BART's learned table starts at row 2
_ = BASE


def read_config(keys, learned_positions: bool = True, scale_default: bool = False) -> dict:
    """BartConfig's keys (MarianConfig has the same ones)."""
    d, where = keys.int("d_model"), keys.where
    sizes = {}
    for side in ("encoder", "decoder"):
        heads = keys.int(f"{side}_attention_heads")
        if heads < 1 or d % heads:
            raise QkvError(f"{where}: d_model ({d}) must be divisible by {side}_attention_heads ({heads})")
        sizes[side] = (keys.int(f"{side}_layers"), heads, keys.int(f"{side}_ffn_dim"))
    vocab = keys.int("vocab_size")
    if keys.int("decoder_vocab_size", vocab) != vocab or keys.raw.get("share_encoder_decoder_embeddings") is False:
        raise QkvError(f"{where}: decoder_vocab_size ({keys.raw.get('decoder_vocab_size')}) differs from vocab_size "
                       f"({vocab}): qkv reads models whose encoder and decoder share one vocabulary")  # fmt: skip
    act = keys.str("activation_function", "gelu")
    if act not in ACTIVATIONS:
        raise QkvError(f"{where}: activation_function {act!r} is not supported: use one of {', '.join(ACTIVATIONS)}")
    positions = keys.int("max_position_embeddings")
    start = keys.int("decoder_start_token_id")
    if not 0 <= start < vocab:
        raise QkvError(f"{where}: decoder_start_token_id ({start}) must be in 0..{vocab - 1}")
    (Le, tau, dff), (Ld, dec_tau, dec_ff) = sizes["encoder"], sizes["decoder"]
    return {
        "n_layers": Le, "n_heads": tau, "d": d, "d_ff": dff, "vocab_size": vocab, "max_positions": positions,
        "norm_eps": 1e-5, "activation": ACTIVATIONS[act],
        "encdec": EncDecOptions(dec_layers=Ld, dec_heads=dec_tau, dec_ff=dec_ff, start=start,
                                  dec_positions=positions, dec_positions_key="max_position_embeddings",
                                  embed_scale=math.sqrt(d) if keys.bool("scale_embedding", scale_default) else 1.0,
                                  learned_positions=learned_positions),
    }  # fmt: skip


def _sides(c):  # (side, layers, heads, d_ff)
    return (("encoder", c.n_layers, c.n_heads, c.d_ff), ("decoder", c.encdec.dec_layers, c.encdec.dec_heads,
            c.encdec.dec_ff))  # fmt: skip


def tensor_shapes(c) -> dict:
    d = c.d
    learned = c.encdec.learned_positions
    shapes = {"model.shared.weight": (c.vocab_size, d), "final_logits_bias": (1, c.vocab_size)}
    for side, L, _, dff in _sides(c):
        s = f"model.{side}."
        if learned:
            shapes[s + "embed_positions.weight"] = (c.max_positions + POSITION_OFFSET, d)
            shapes |= {s + "layernorm_embedding.weight": (d,), s + "layernorm_embedding.bias": (d,)}
        for l in range(L):
            p = f"{s}layers.{l}."
            attns = ["self_attn"] + (["encoder_attn"] if side == "decoder" else [])
            for a in attns:
                for x in ("q_proj", "k_proj", "v_proj", "out_proj"):
                    shapes |= {f"{p}{a}.{x}.weight": (d, d), f"{p}{a}.{x}.bias": (d,)}
            for n in [a + "_layer_norm" for a in attns] + ["final_layer_norm"]:
                shapes |= {f"{p}{n}.weight": (d,), f"{p}{n}.bias": (d,)}
            shapes |= {p + "fc1.weight": (dff, d), p + "fc1.bias": (dff,), p + "fc2.weight": (d, dff),
                       p + "fc2.bias": (d,)}  # fmt: skip
    return shapes


def parameter_table(c) -> list[Param]:
    d, V = c.d, c.vocab_size
    (_, Le, tau, dff), (_, Ld, dtau, dff_d) = _sides(c)
    out = [Param("shared", "E", (V, d), 1, "token vectors, shared by encoder, decoder and head")]
    if c.encdec.learned_positions:
        out += [Param("embed_positions", "P", (c.max_positions + POSITION_OFFSET, d), 2, "learned position vectors "
                      "(encoder, decoder; row p + 2 for position p)"),
                Param("layernorm_embedding", "gamma, beta", (2, d), 2, "embedding LayerNorm")]  # fmt: skip
    for side, L, heads, n_attn, ff in (("encoder", Le, tau, 1, dff), ("decoder", Ld, dtau, 2, dff_d)):
        dk = d // heads
        what = "self" if n_attn == 1 else "self, cross"
        for x, meaning in (("q", "query"), ("k", "key"), ("v", "value")):
            out += [
                Param(
                    f"{side}_W_{x}",
                    f"W_j^{x}",
                    (d, dk),
                    n_attn * L * heads,
                    f"{side} {meaning} projection of head j ({what})",
                ),
                Param(f"{side}_b_{x}", f"b_j^{x}", (dk,), n_attn * L * heads, f"{side} {meaning} bias"),
            ]
        out += [
            Param(f"{side}_W_o", "W^o", (d, d), n_attn * L, f"{side} output projection ({what})"),
            Param(f"{side}_b_o", "b^o", (d,), n_attn * L, f"{side} output bias"),
            Param(f"{side}_ln", "gamma, beta", (2, d), (n_attn + 1) * L, f"{side} LayerNorms (post-norm)"),
            Param(f"{side}_W_1", "W_1, b_1", (d + 1, ff), L, f"{side} feed-forward expansion and bias"),
            Param(f"{side}_W_2", "W_2, b_2", (ff + 1, d), L, f"{side} feed-forward projection and bias"),
        ]
    return out + [Param("final_logits_bias", "b^head", (V,), 1, "output head bias (the head is E)")]


def prepare(w, c, dtype, positions=None) -> Params:
    """positions: (P, d) fixed position vectors (Marian's sinusoids) instead of BART's learned table."""

    def lin(name):
        return Linear(w(name + ".weight"), w(name + ".bias"), out_in=True)

    def norm(name):
        return Norm(w(name + ".weight"), w(name + ".bias"), c.norm_eps)

    def proj(name, heads):
        return Projections(lin(name + ".q_proj"), lin(name + ".k_proj"), lin(name + ".v_proj"),
                           lin(name + ".out_proj"), heads, c.d // heads)  # fmt: skip

    stacks = []
    for side, L, heads, _ in _sides(c):
        layers = []
        for l in range(L):
            p = f"model.{side}.layers.{l}."
            layer = Layer(
                proj(p + "self_attn", heads),
                norm(p + "self_attn_layer_norm"),
                FeedForward(lin(p + "fc1"), lin(p + "fc2"), c.activation),
                norm(p + "final_layer_norm"),
            )
            if side == "decoder":
                layer.cross, layer.cross_norm = proj(p + "encoder_attn", heads), norm(p + "encoder_attn_layer_norm")
            layers.append(layer)
        if positions is None:
            s = f"model.{side}."
            stacks.append(
                Stack(layers, w(s + "embed_positions.weight"), POSITION_OFFSET, norm(s + "layernorm_embedding"))
            )
        else:
            stacks.append(Stack(layers, positions))
    E = w("model.shared.weight")
    opts = Options(scale=None, pre_norm=False, embed_scale=c.encdec.embed_scale)
    return Params(E, stacks[0], stacks[1], E, w("final_logits_bias").reshape(-1), opts)
