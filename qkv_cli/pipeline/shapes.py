"""`qkv shapes`: the matrices of one attention layer for the sizes asked, or for a checkpoint's config.

Pure Python on the fast path: numpy is never imported, tokenizers only when a TEXT (or context) sets m (or n),
and a checkpoint is read from its config.json alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from qkv_cli.core.shapes import INPUT, Matrix, matrices
from qkv_cli.errors import QkvError


@dataclass
class Shapes:
    d: int
    tau: int
    m: int
    n: int | None
    dtype: str
    kv_heads: int | None
    mats: list[Matrix]
    model: object = None  # models.formats.config.ModelConfig
    params: list = field(default_factory=list)  # models.formats.config.Param, for a checkpoint
    file_params: int = 0  # parameters stored in the checkpoint's files (counted from their headers)


def count_tokens(text: str, tokenizer: str) -> int:
    from qkv_cli.text.inputs import get_text
    from qkv_cli.text.tokens import tokenize

    return len(tokenize(get_text(text, None), tokenizer))


def for_sizes(text, d, tau, m, n, dtype, tokenizer, kv_heads=None, context=None) -> Shapes:
    if text is not None and m is not None:
        raise QkvError("give either TEXT or --m, not both")
    if context is not None and n is not None:
        raise QkvError("give either --context (n = its tokens) or --n, not both")
    m = count_tokens(text, tokenizer) if text is not None else (30 if m is None else m)
    n = count_tokens(context, tokenizer) if context is not None else n  # cross-attention: n = context tokens
    return Shapes(d, tau, m, n, dtype, kv_heads, matrices(d, tau, m, n, kv_heads))


def for_model(spec: str, text, m, dtype: str, download: bool = False, n: int | None = None) -> Shapes:
    """A checkpoint's real dimensions and parameters per matrix, from its config and its files' headers only."""
    import math

    from qkv_cli.models import family_for, resolve_model
    from qkv_cli.models.formats.safetensors import SKIP
    from qkv_cli.models.formats.stores import name_of
    from qkv_cli.models.load import stored_tensors

    if text is not None:
        raise QkvError("shapes --model takes --m, not TEXT (the model's tokenizer adds its own special tokens)")
    c, stored = stored_tensors(resolve_model(spec, download=download), name_of(spec))
    m = 30 if m is None else m
    if n is not None and c.encdec is None:
        raise QkvError("--n cannot be used with --model: the checkpoint fixes d, the heads, the tokenizer and its mask")
    if c.encdec is not None:  # an encoder-decoder: encoder, decoder and cross matrices
        from qkv_cli.pipeline.encdec.shapes import encdec_matrices

        mats = encdec_matrices(c, m, m if n is None else n)
    elif c.latent is not None:  # multi-head latent attention (DeepSeek-V3)
        from qkv_cli.pipeline.mla_shapes import latent_matrices

        mats = latent_matrices(c, m, input_meaning(c))
    else:
        mats = None
    kv = c.n_kv_heads if c.n_kv_heads != c.n_heads else None
    mats = mats or matrices(c.d, c.n_heads, m, None, kv, d_k=c.d_k, scale=c.attention and c.attention.scale,
                    softcap=c.attention and c.attention.softcap,
                    input_meaning=input_meaning(c))  # fmt: skip
    counted = sum(math.prod(t.shape) for name, t in stored.items() if t.is_float and not name.endswith(SKIP))
    n = (m if n is None else n) if c.encdec is not None else None
    return Shapes(c.d, c.n_heads, m, n, dtype, kv, mats, c, family_for(c.family).parameter_table(c), counted)


def input_meaning(c) -> str:
    """What H is for a checkpoint's attention: the family's own words, and for a RoPE decoder that no positions are
    added to it (RoPE turns Q and K)."""
    if c.rope is None:  # BERT, GPT-2: learned position embeddings are added to the token embeddings
        return INPUT
    from qkv_cli.models import family_for

    return f"{family_for(c.family).ATTENTION_INPUT}; no positions added (RoPE turns Q and K)"
