"""text -> tokens -> H -> Q, K, V -> Softmax(Q K^T * scale + Mask) V -> concat W^o, on seeded random weights.

Cross-attention (a context Y): Q = X W^q from the text, K = Y W^k and V = Y W^v from the context, which gets its
own positions 0..n-1. Padding (a batch) and a custom grid (--mask-file) join the mask as rules of their own.
"""

from __future__ import annotations

import numpy as np

from qkv_cli.core import budget, masks
from qkv_cli.core.embed import embed
from qkv_cli.core.gqa import kv_heads_of
from qkv_cli.core.kernels import attention, resolve_scale
from qkv_cli.core.numerics import scaled_scores
from qkv_cli.core.projection import combine, init_projections, project
from qkv_cli.core.result import LayerResult, Result
from qkv_cli.core.settings import Settings
from qkv_cli.errors import QkvError

HINTS = "--dtype float32, fewer heads (--tau), a smaller --d, or a shorter text"


def estimate(m: int, settings: Settings, n: int | None = None) -> int:
    itemsize = 4 if settings.dtype == "float32" else 8
    return budget.attention_bytes(m, m if n is None else n, settings.d, settings.tau, itemsize)


def check_cross(settings: Settings, has_context: bool) -> None:
    """--causal / --window compare positions of one sequence: with a context they mean nothing."""
    if not has_context:
        return
    if settings.window is not None:
        raise QkvError(
            f"--window {settings.window} needs self-attention: with --context the keys are another "
            "text, so 'the n_c most recent keys' means nothing; drop --window or --context"
        )
    if settings.chunk is not None:
        raise QkvError(f"--chunk {settings.chunk} needs self-attention: with --context the keys are another text, "
                       "so 'the query's own chunk' means nothing; drop --chunk or --context")  # fmt: skip
    if settings.causal:
        raise QkvError(
            "--causal needs self-attention: with --context the keys are another text, so 'keys "
            "before the query' means nothing; drop --causal or --context"
        )


def run(
    text: str,
    settings: Settings,
    *,
    tokens=None,
    max_memory: int | None = None,
    context: str | None = None,
    context_tokens=None,
    allowed=None,
    padding=None,
    output=None,
) -> Result:
    """The whole pipeline on random (seeded) weights; a SEEDED Result.

    context / context_tokens: cross-attention, keys and values from this text.
    allowed: a custom (m, n) bool grid, True = may attend (--mask-file); padding: (n,) bool, True = pad key.
    output: core.output_size.Output, the JSON or CSV to print: refused above its limit before anything runs.
    """
    from qkv_cli.pipeline import ablate
    from qkv_cli.text.tokens import tokenize

    check_cross(settings, context is not None or context_tokens is not None)
    limit = budget.default_max_memory() if max_memory is None else max_memory
    if tokens is None and context is None and context_tokens is None:  # refuse a huge text before tokenizing it
        budget.check_text(
            text,
            lambda t: len(tokenize(t, settings.tokenizer)),
            lambda k: estimate(k, settings),
            limit,
            HINTS,
            settings.dtype,
        )
    tokens = tokenize(text, settings.tokenizer) if tokens is None else tokens
    if context_tokens is None and context is not None:
        context_tokens = tokenize(context, settings.tokenizer)
    m = len(tokens)
    n = m if context_tokens is None else len(context_tokens)
    if allowed is not None:
        masks.check_shape(allowed, m, n, "--mask-file")
    budget.check_budget(estimate(m, settings, n), limit, HINTS, dtype=settings.dtype)
    if output is not None:
        from qkv_cli.pipeline.output_plan import check_dense

        check_dense(output, settings, tokens, n)
    dtype = np.dtype(settings.dtype)
    H = embed(list(tokens.strings), settings.d, settings.seed, settings.positions, dtype)
    Y = H if context_tokens is None else embed(list(context_tokens.strings), settings.d, settings.seed,
                                                 settings.positions, dtype)  # fmt: skip
    Wq, Wk, Wv, Wo = init_projections(
        settings.d, settings.tau, settings.seed, settings.projection, dtype, kv_heads=settings.kv_heads
    )
    Q, K, V = project(H, Wq), project(Y, Wk), project(Y, Wv)  # (tau, m, dk), (G, n, dk), (G, n, dk)
    Q, K, V = ablate.apply(Q, K, V, settings)  # no-op unless --ablate
    scale = resolve_scale(settings.scale, settings.d_k)
    rules = masks.MaskSpec(causal=settings.causal, window=settings.window, chunk=settings.chunk, padding=padding,
                           custom=allowed)  # fmt: skip
    mask = masks.additive(rules, m, n, dtype)
    heads, weights = attention(Q, K, V, mask=mask, scale=scale, kernel=settings.kernel)
    result = LayerResult(
        tokens=tokens, settings=settings, scale=scale, kernel=settings.kernel, H=H, Wq=Wq, Wk=Wk,
        Wv=Wv, Q=Q, K=K, V=V, scores=scaled_scores(Q, K[kv_heads_of(settings.tau, settings.G)], scale),
        mask=np.zeros((m, n), dtype=dtype) if mask is None else mask, weights=weights, heads=heads, Wo=Wo,
        output=combine(heads, Wo), rules=rules, context=context_tokens,
        H_context=None if context_tokens is None else Y,
    )  # fmt: skip
    if settings.ablate is not None:
        from dataclasses import replace

        intact = run(text, replace(settings, ablate=None), tokens=tokens, max_memory=max_memory,
                     context_tokens=context_tokens, allowed=allowed, padding=padding)  # fmt: skip
        result.ablation = ablate.report(intact, result)
    return result
