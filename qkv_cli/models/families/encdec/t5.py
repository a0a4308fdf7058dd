"""T5 (Raffel et al. 2020), T5 v1.1, mT5 and UMT5: an encoder-decoder with relative position buckets.

scores = Q K^T + b[bucket(t - i)]        no 1/sqrt(d_k); one bias table per stack, shared (UMT5: one per layer)
x <- x + Attention(RMSNorm(x))            pre-norm; RMSNorm without mean and without shift
x <- x + W_o relu(W_i x)                  v1.1 (feed_forward_proj: gated-gelu): W_o (gelu(W_i0 x) * W_i1 x)
logits = (X d^-0.5) E^T                   when the head is tied to the embeddings (v1.0)
"""

from __future__ import annotations

from qkv_cli.errors import QkvError
from qkv_cli.models.families.encdec.config import EncDecOptions
from qkv_cli.models.formats.config import Param
from qkv_cli.models.layers import encdec as BASE
from qkv_cli.models.layers.basic import Linear
from qkv_cli.models.layers.encdec import FeedForward, Layer, Norm, Options, Params, Projections, Stack

MODEL_TYPE = "t5"
PREFIXES = ("",)
HEAD = "lm_head.weight"  # used when the checkpoint stores one; else the shared embeddings
ATTENTION_INPUT = "the layer input, RMS-normalized"
FF_ACTIVATIONS = {"relu": "relu", "gelu": "gelu", "gelu_new": "gelu_new", "silu": "silu", "swish": "silu"}
_ = BASE


def read_config(keys) -> dict:
    """T5Config's keys: d_model, d_kv, d_ff, num_layers, num_decoder_layers, num_heads, the buckets."""
    proj = keys.str("feed_forward_proj", "relu")
    parts = proj.split("-")
    gated = parts[0] == "gated" and len(parts) == 2
    act = "gelu_new" if proj == "gated-gelu" else parts[-1]
    if (len(parts) > 1 and not gated) or act not in FF_ACTIVATIONS:
        raise QkvError(f"{keys.where}: feed_forward_proj {proj!r} is not supported: use relu, gated-gelu or "
                       "gated-silu")  # fmt: skip
    layers, heads = keys.int("num_layers"), keys.int("num_heads")
    buckets, distance = keys.int("relative_attention_num_buckets", 32), keys.int("relative_attention_max_distance", 128)
    if buckets < 4 or distance < buckets // 2:
        raise QkvError(f"{keys.where}: relative_attention_num_buckets ({buckets}) must be at least 4 and "
                       f"relative_attention_max_distance ({distance}) at least half of it")  # fmt: skip
    positions = keys.int("n_positions", 512)  # relative positions have no table: T5's trained length
    tied = keys.raw.get("tie_word_embeddings", True) is not False
    tied = tied and keys.raw.get("model_type") != "mt5"  # mT5 never scales its output by d^-0.5 (transformers')
    return {
        "n_layers": layers, "n_heads": heads, "d": keys.int("d_model"), "d_ff": keys.int("d_ff"),
        "head_dim": keys.int("d_kv"), "vocab_size": keys.int("vocab_size"), "max_positions": positions,
        "positions_key": "n_positions", "norm_eps": keys.number("layer_norm_epsilon", 1e-6),
        "activation": FF_ACTIVATIONS[act],
        "encdec": EncDecOptions(dec_layers=keys.int("num_decoder_layers", layers), dec_heads=heads, gated=gated,
                                  buckets=buckets, max_distance=distance, start=keys.int("decoder_start_token_id", 0),
                                  dec_positions=positions, dec_positions_key="n_positions",
                                  scale_head=bool(keys.raw.get("scale_decoder_outputs", tied)),
                                  dec_d_k=keys.int("d_kv"), scaled=False),
    }  # fmt: skip


def _layers(c) -> list[tuple[str, int, bool]]:  # (prefix, index of the feed-forward sub-layer, decoder?)
    return [(f"encoder.block.{l}.", 1, False) for l in range(c.n_layers)] + [
        (f"decoder.block.{l}.", 2, True) for l in range(c.encdec.dec_layers)]  # fmt: skip


def tensor_shapes(c) -> dict:
    d, inner, dff, tau = c.d, c.n_heads * c.d_k, c.d_ff, c.n_heads
    shapes = {"shared.weight": (c.vocab_size, d), "encoder.final_layer_norm.weight": (d,),
              "decoder.final_layer_norm.weight": (d,)}  # fmt: skip
    for side, L in (("encoder", c.n_layers), ("decoder", c.encdec.dec_layers)):
        for l in range(L if c.family == "umt5" else 1):  # UMT5: a table per layer; T5: layer 0's, shared
            shapes[f"{side}.block.{l}.layer.0.SelfAttention.relative_attention_bias.weight"] = (c.encdec.buckets, tau)
    for p, ff, dec in _layers(c):
        attns = ["layer.0.SelfAttention"] + (["layer.1.EncDecAttention"] if dec else [])
        for a in attns:
            shapes.update({f"{p}{a}.{x}.weight": (inner, d) for x in "qkv"} | {f"{p}{a}.o.weight": (d, inner)})
        for i in range(ff + 1):
            shapes[f"{p}layer.{i}.layer_norm.weight"] = (d,)
        f = f"{p}layer.{ff}.DenseReluDense."
        wi = ("wi_0", "wi_1") if c.encdec.gated else ("wi",)
        shapes.update({f + w + ".weight": (dff, d) for w in wi} | {f + "wo.weight": (d, dff)})
    return shapes


def parameter_table(c) -> list[Param]:
    d, dk, dff = c.d, c.d_k, c.d_ff
    Le, Ld, tau = c.n_layers, c.encdec.dec_layers, c.n_heads
    n_wi = 2 if c.encdec.gated else 1
    return [
        Param("shared", "E", (c.vocab_size, d), 1, "token vectors, shared by encoder, decoder and head"),
        Param(
            "relative_attention_bias",
            "b",
            (c.encdec.buckets, tau),
            Le + Ld if c.family == "umt5" else 2,
            "bias per distance bucket and head (UMT5: every layer; else encoder, decoder)",
        ),  # fmt: skip
        *[
            Param(
                f"W_{x}",
                f"W_j^{x}",
                (d, dk),
                (Le + 2 * Ld) * tau,
                f"{what} projection of head j (encoder self, decoder self, cross)",
            )
            for x, what in (("q", "query"), ("k", "key"), ("v", "value"))
        ],  # fmt: skip
        Param("W_o", "W^o", (tau * dk, d), Le + 2 * Ld, "output projection of the concatenated heads"),
        Param("rms_gamma", "gamma", (d,), 2 * Le + 3 * Ld + 2, "RMSNorm scale (before each sub-layer, final)"),
        Param("W_i", "W_i", (d, dff), n_wi * (Le + Ld), "feed-forward expansion" + (" (gelu and gate)" * (n_wi > 1))),
        Param("W_2", "W_o^ff", (dff, d), Le + Ld, "feed-forward projection back to d"),
        *([Param("lm_head", "W^head", (d, c.vocab_size), 1, "output head")] if not c.encdec.scale_head else []),
    ]


def prepare(w, c, dtype) -> Params:
    def lin(name):
        return Linear(w(name + ".weight"), None, out_in=True)

    def norm(name):
        return Norm(w(name + ".weight"), None, c.norm_eps)

    def proj(name, tau=c.n_heads):
        return Projections(lin(name + ".q"), lin(name + ".k"), lin(name + ".v"), lin(name + ".o"), tau, c.d_k)

    enc, dec = [], []
    for p, ff, is_dec in _layers(c):
        f = f"{p}layer.{ff}.DenseReluDense."
        gated = c.encdec.gated
        ffn = FeedForward(lin(f + ("wi_0" if gated else "wi")), lin(f + "wo"), c.activation,
                          lin(f + "wi_1") if gated else None)  # fmt: skip
        layer = Layer(proj(p + "layer.0.SelfAttention"), norm(p + "layer.0.layer_norm"), ffn,
                      norm(f"{p}layer.{ff}.layer_norm"))  # fmt: skip
        if is_dec:
            layer.cross, layer.cross_norm = proj(p + "layer.1.EncDecAttention"), norm(p + "layer.1.layer_norm")
        (dec if is_dec else enc).append(layer)

    def stack(side, layers):
        count = len(layers) if c.family == "umt5" else 1  # UMT5: a table per layer; T5: layer 0's, shared
        tables = [w(f"{side}.block.{l}.layer.0.SelfAttention.relative_attention_bias.weight") for l in range(count)]
        per_layer = tables if c.family == "umt5" else None
        return Stack(layers, buckets=tables[0], layer_buckets=per_layer, final_norm=norm(f"{side}.final_layer_norm"))

    E = w("shared.weight")
    head = w("__head__") if "__head__" in w and not c.encdec.scale_head else E
    opts = Options(scale=1.0, pre_norm=True, num_buckets=c.encdec.buckets, max_distance=c.encdec.max_distance,
                   head_scale=c.d**-0.5 if c.encdec.scale_head else 1.0)  # fmt: skip
    return Params(E, stack("encoder", enc), stack("decoder", dec), head, None, opts)
