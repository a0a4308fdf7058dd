"""BERT-family encoders: word + position + token-type embeddings, then post-LayerNorm blocks.

x_0 = LN(E[ids] + P[0..m-1] + T[type_ids])
block l:  a = MultiHead(x) (bidirectional: no mask);  x' = LN(x + a);  x'' = LN(x' + W_2 gelu(W_1 x' + b_1) + b_2)
masked-LM head (BertForMaskedLM's cls.predictions, when the checkpoint holds it): z = LN(act(W_t x_L + b_t)) D^T + b,
one score per vocabulary entry at every position; D is E (tied, as BERT's configs are) unless the checkpoint stores
its own decoder matrix.
Checkpoint matrices are PyTorch Linear weights (out, in), used as stored (layers.Linear computes (W x^T)^T).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from qkv_cli.core.masks import MaskSpec
from qkv_cli.errors import QkvError
from qkv_cli.models.formats.config import ModelConfig, Param, attention_params, layer_norm_mlp_params
from qkv_cli.models.layers.attention import AttentionWeights, Hooks, self_attention
from qkv_cli.models.layers.basic import ACTIVATIONS, Linear, layer_norm

MODEL_TYPE = "bert"
PREFIXES = ("bert.", "")
ATTENTION_INPUT = "the layer input"
MLM = "cls.predictions."  # the masked-LM head's tensors, outside the encoder's 'bert.' prefix
MLM_BIAS = ("bias", "decoder.bias")  # where transformers versions store b
MLM_DECODER = "decoder.weight"  # D (V, d), stored only when the head is not tied to E
MLM_TRANSFORM = ("dense.weight", "dense.bias", "LayerNorm.weight", "LayerNorm.bias")  # under MLM + "transform."


def read_config(keys) -> dict:
    """The config.json keys a BERT-family checkpoint uses."""
    if keys.get("position_embedding_type", "absolute") != "absolute":
        raise QkvError(
            f"{keys.where}: position_embedding_type {keys.raw['position_embedding_type']!r} is not supported"
        )
    types = keys.int("type_vocab_size", 2)
    if types < 1:
        raise QkvError(f"{keys.where}: 'type_vocab_size' must be at least 1 (BERT adds token type 0 to every token)")
    return {
        "n_layers": keys.int("num_hidden_layers"),
        "n_heads": keys.int("num_attention_heads"),
        "d": keys.int("hidden_size"),
        "d_ff": keys.int("intermediate_size"),
        "vocab_size": keys.int("vocab_size"),
        "max_positions": keys.int("max_position_embeddings"),
        "type_vocab_size": types,
        "norm_eps": keys.number("layer_norm_eps", 1e-12),
        "activation": keys.str("hidden_act", "gelu"),
    }


def parameter_table(c: ModelConfig) -> list[Param]:
    """Every learned matrix the forward pass uses (the pooler is not used and not listed)."""
    d = c.d
    ln1, ln2 = "LayerNorm after attention (post-LN)", "LayerNorm after the feed-forward (post-LN)"
    return [
        Param("word_embeddings", "E", (c.vocab_size, d), 1, "token vectors (one row per vocabulary id)"),
        Param("position_embeddings", "P", (c.max_positions, d), 1, "learned position vectors"),
        Param("token_type_embeddings", "T", (c.type_vocab_size, d), 1, "segment vectors (sentence A/B)"),
        Param("embeddings_ln_gamma", "gamma", (d,), 1, "embedding LayerNorm scale"),
        Param("embeddings_ln_beta", "beta", (d,), 1, "embedding LayerNorm shift"),
        *attention_params(c),
        *layer_norm_mlp_params(c, ln1, ln2),
    ]


def tensor_shapes(c: ModelConfig) -> dict[str, tuple[int, ...]]:
    """Every checkpoint tensor the forward pass reads (without the 'bert.' prefix) -> its expected shape."""
    d, dff = c.d, c.d_ff
    shapes = {
        "embeddings.word_embeddings.weight": (c.vocab_size, d),
        "embeddings.position_embeddings.weight": (c.max_positions, d),
        "embeddings.token_type_embeddings.weight": (c.type_vocab_size, d),
        "embeddings.LayerNorm.weight": (d,),
        "embeddings.LayerNorm.bias": (d,),
    }
    for l in range(c.n_layers):
        p = f"encoder.layer.{l}."
        for proj in ("query", "key", "value"):
            shapes[p + f"attention.self.{proj}.weight"] = (d, d)
            shapes[p + f"attention.self.{proj}.bias"] = (d,)
        shapes.update(
            {
                p + "attention.output.dense.weight": (d, d),
                p + "attention.output.dense.bias": (d,),
                p + "attention.output.LayerNorm.weight": (d,),
                p + "attention.output.LayerNorm.bias": (d,),
                p + "intermediate.dense.weight": (dff, d),
                p + "intermediate.dense.bias": (dff,),
                p + "output.dense.weight": (d, dff),
                p + "output.dense.bias": (d,),
                p + "output.LayerNorm.weight": (d,),
                p + "output.LayerNorm.bias": (d,),
            }
        )
    return shapes


def optional_tensors(c: ModelConfig) -> dict[str, tuple[int, ...]]:
    """The masked-LM head's tensors (full names), read when the checkpoint holds them (a sentence-transformer has
    none); the decoder matrix D is E unless the checkpoint stores its own."""
    d, t = c.d, MLM + "transform."
    shapes = {t + k: (d, d) if k == "dense.weight" else (d,) for k in MLM_TRANSFORM}
    return shapes | {MLM + b: (c.vocab_size,) for b in MLM_BIAS} | {MLM + MLM_DECODER: (c.vocab_size, d)}


@dataclass
class MaskedLM:
    transform: Linear  # d -> d
    ln: tuple[np.ndarray, np.ndarray]
    bias: np.ndarray  # (V,)
    decoder: np.ndarray | None = None  # D (V, d) when stored apart from E (an untied head); None: E


@dataclass
class BertLayer:
    attn: AttentionWeights
    ln1: tuple[np.ndarray, np.ndarray]  # after attention
    ffn1: Linear  # d -> d_ff
    ffn2: Linear  # d_ff -> d
    ln2: tuple[np.ndarray, np.ndarray]  # after the feed-forward


@dataclass
class Params:
    E: np.ndarray  # (V, d) word embeddings
    P: np.ndarray  # (P, d) position embeddings
    T: np.ndarray  # (types, d) token-type embeddings
    ln_emb: tuple[np.ndarray, np.ndarray]
    blocks: list[BertLayer]
    head: MaskedLM | None = None  # the masked-LM head, when the checkpoint holds it


def prepare(w, c: ModelConfig, dtype) -> Params:
    """Checkpoint tensors (prefix stripped) -> Params in `dtype`; Linear weights stay (out, in), Q|K|V stacked."""

    v = w  # w(name): the tensor, cast to dtype (models.formats.safetensors.Tensors)

    def dense(name):
        return Linear(v(name + ".weight"), v(name + ".bias"), out_in=True)

    blocks = []
    for l in range(c.n_layers):
        p = f"encoder.layer.{l}."
        s = p + "attention.self."
        qkv = Linear(
            W=np.concatenate([v(s + "query.weight"), v(s + "key.weight"), v(s + "value.weight")]),  # (3d, d)
            b=np.concatenate([v(s + "query.bias"), v(s + "key.bias"), v(s + "value.bias")]),
            out_in=True,
        )
        blocks.append(
            BertLayer(
                attn=AttentionWeights(qkv, dense(p + "attention.output.dense"), c.n_heads, c.n_kv_heads, c.d_k),
                ln1=(v(p + "attention.output.LayerNorm.weight"), v(p + "attention.output.LayerNorm.bias")),
                ffn1=dense(p + "intermediate.dense"),
                ffn2=dense(p + "output.dense"),
                ln2=(v(p + "output.LayerNorm.weight"), v(p + "output.LayerNorm.bias")),
            )
        )
    return Params(
        head=_masked_lm(v),
        E=v("embeddings.word_embeddings.weight"),
        P=v("embeddings.position_embeddings.weight"),
        T=v("embeddings.token_type_embeddings.weight"),
        ln_emb=(v("embeddings.LayerNorm.weight"), v("embeddings.LayerNorm.bias")),
        blocks=blocks,
    )


def _masked_lm(v) -> MaskedLM | None:
    t = MLM + "transform."
    bias = next((MLM + b for b in MLM_BIAS if MLM + b in v), None)
    if bias is None or any(t + k not in v for k in MLM_TRANSFORM):
        return None
    return MaskedLM(Linear(v(t + "dense.weight"), v(t + "dense.bias"), out_in=True),
                    (v(t + "LayerNorm.weight"), v(t + "LayerNorm.bias")), v(bias),
                    v(MLM + MLM_DECODER) if MLM + MLM_DECODER in v else None)  # fmt: skip


def embed(params: Params, c: ModelConfig, ids, start: int = 0, type_ids=None):  # [m] -> [m, d]
    """x_0 = LN(E[ids] + P[0..m-1] + T[type_ids]); type_ids default to 0 (one sentence)."""
    m = len(ids)
    x = params.E[ids]  # (m, d), a new array
    x += params.P[:m]
    if type_ids is None:
        x += params.T[0]
    else:
        x += params.T[type_ids]
    return layer_norm(x, *params.ln_emb, c.norm_eps)


def layer_mask(c: ModelConfig, layer: int) -> MaskSpec:  # bidirectional: every query sees every key
    return MaskSpec()


def layer_type(c: ModelConfig, layer: int) -> str:
    return ""


def layer_extras(p, c: ModelConfig, layer: int, m: int, dtype) -> dict:  # no RoPE, no QK-norm
    return {}


def hooks(c: ModelConfig, layer: int) -> Hooks:  # plain scaled dot-product attention
    return Hooks(scale=1 / math.sqrt(c.d_k))


def block(p: Params, c: ModelConfig, layer: int, x, mask, kernel, cache=None, start=0, values=None, into=None,
          rows=None, edit=None):  # fmt: skip
    """Post-LN: x' = LN(x + MultiHead(x)); x'' = LN(x' + FFN(x')). edit(point, value) -> value: reads or replaces
    "attn" (MultiHead(x), W^o's output), "mlp" (FFN(x'), W_2's output) and the attention's points (pipeline.patch)."""
    b = p.blocks[layer]
    parts = self_attention(
        x, b.attn, hooks(c, layer)._replace(values=values, edit=edit), mask, kernel, into=into, rows=rows
    )  # H = x: the layer's input
    a = parts.output if edit is None else edit("attn", parts.output)
    h = a + x
    h = layer_norm(h, *b.ln1, c.norm_eps)
    f = ACTIVATIONS[c.activation](b.ffn1(h))  # (m, d) x (d, d_ff) -> (m, d_ff)
    out = b.ffn2(f)  # (m, d_ff) x (d_ff, d) -> (m, d)
    if edit is not None:
        out = edit("mlp", out)
    out += h
    return layer_norm(out, *b.ln2, c.norm_eps), parts


def final(p: Params, c: ModelConfig, x):  # [m, d] -> [m, d]: BERT has no final LayerNorm
    return x


def logits(p: Params, c: ModelConfig, h):  # an encoder: no output head that predicts the next token
    return None


def masked_lm(p: Params, c: ModelConfig, h):  # [m, d] -> [m, V], or None without the head
    """z = LN(act(h W_t^T + b_t)) D^T + b (D: E when tied): the scores of the token at each (masked) position."""
    if p.head is None:
        return None
    t = layer_norm(ACTIVATIONS[c.activation](p.head.transform(h)), *p.head.ln, c.norm_eps)  # (m, d)
    D = p.E if p.head.decoder is None else p.head.decoder
    return t @ D.T + p.head.bias  # (m, d) x (d, V) -> (m, V)
