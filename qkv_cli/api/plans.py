"""shapes and mask: what a run computes and what its mask removes, without running it (``qkv shapes``, ``qkv mask``).

Both build what the CLI prints from the same pipeline functions, so the numbers are the commands' own.
"""

from __future__ import annotations

from os import PathLike
from typing import TYPE_CHECKING

from qkv_cli.errors import QkvError, owning_float_errors

if TYPE_CHECKING:  # for the hints only
    import numpy as np


def _spec(model) -> str:
    """model= as a checkpoint's name or path (a loaded model: its folder or file)."""
    if isinstance(model, str) or isinstance(model, PathLike):
        return str(model)
    if hasattr(model, "config") and hasattr(model, "path"):
        return str(model.path)
    raise QkvError(f"model must be a name, a path or qkv.load(...)'s result, got {type(model).__name__}")


@owning_float_errors
def shapes(text: str | None = None, model: str | PathLike | object | None = None, *, d: int = 512, heads: int = 8,
           m: int | None = None, n: int | None = None, dtype: str = "float64", tokenizer: str = "word",
           kv_heads: int | None = None, context: str | None = None, download: bool = False) -> dict:  # fmt: skip
    """The shape, parameters, FLOPs and bytes of every matrix of masked multi-head attention, as
    ``qkv shapes --format json`` prints them.

    Parameters
    ----------
    text : the text whose tokens set m (or ``m`` itself; default 30).
    model : a checkpoint (name, path or ``qkv.load(...)``'s result): its real dimensions, its parameter table
        (``parameters``, ``total_parameters``), its KV cache and one layer's matrices at m tokens; read from its
        config and its files' headers only.
    d, heads, kv_heads : random weights: the width d, tau and G.
    n, context : cross-attention: n keys, or the tokens of ``context``.

    Returns
    -------
    dict : ``matrices`` (name -> shape, params, flops, bytes, meaning) and the sizes (d, tau, m, n, dtype ...).
    """
    from qkv_cli.core.settings import DTYPES, check_choice
    from qkv_cli.views.console.shapes import doc

    check_choice("dtype", dtype, DTYPES)
    if model is not None:
        given = [k for k, v in {"d": d != 512, "heads": heads != 8, "kv_heads": kv_heads, "context": context,
                                "tokenizer": tokenizer != "word"}.items() if v]  # fmt: skip
        if given:
            raise QkvError(
                f"{given[0]} cannot be used with model=: the checkpoint fixes d, the heads and the tokenizer"
            )
        return doc(shape_plan(text, _spec(model), m=m, n=n, dtype=dtype, download=download))
    from qkv_cli.core.settings import Settings

    Settings(d=d, tau=heads, kv_heads=kv_heads, dtype=dtype, tokenizer=tokenizer)  # the CLI's checks of each
    return doc(shape_plan(text, None, d=d, heads=heads, m=m, n=n, dtype=dtype, tokenizer=tokenizer,
                          kv_heads=kv_heads, context=context))  # fmt: skip


def shape_plan(text: str | None, model: str | None, *, d: int = 512, heads: int = 8, m: int | None = None,
               n: int | None = None, dtype: str = "float64", tokenizer: str = "word", kv_heads: int | None = None,
               context: str | None = None, context_file=None, download: bool = False):  # fmt: skip
    """The pipeline's Shapes of ``qkv shapes`` (what ``shapes`` returns as a dict, and the CLI prints): a checkpoint's
    (model: its name or path) or random weights' of these sizes; context_file: the context read from a file."""
    from qkv_cli.api.arguments import read_context
    from qkv_cli.pipeline import shapes as plan

    if model is not None:
        return plan.for_model(model, text, m, dtype, download, n)
    context = read_context(context, context_file, text == "-")
    return plan.for_sizes(text, d, heads, m, n, dtype, tokenizer, kv_heads, context)


class Mask:
    """The combined Mask of one attention layer, as ``qkv mask`` draws it.

    Attributes: ``tokens`` (m query labels), ``key_tokens`` (n), ``allowed`` (m, n) bool, ``mask`` (m, n) the
    additive Mask (0 or -inf), ``removed_by`` (m x n lists of the rules that remove each cell), ``counts`` (cells
    per rule, and ``allowed``), ``rules`` (rule -> its meaning); a checkpoint's ``layer`` and ``layer_type``."""

    def __init__(self, grid):
        from qkv_cli.views.console.mask import mask_doc

        self._grid, self._doc = grid, mask_doc(grid)
        self.tokens, self.key_tokens = list(grid.labels), list(grid.key_labels)
        self.removed_by, self.counts, self.rules = self._doc["removed_by"], self._doc["counts"], self._doc["rules"]
        self.layer, self.layer_type = grid.layer, grid.layer_type

    @property
    def allowed(self) -> np.ndarray:
        return self._grid.allowed

    @property
    def mask(self) -> np.ndarray:
        import numpy as np

        return np.where(self._grid.allowed, 0.0, -np.inf)

    def doc(self) -> dict:
        """What ``qkv mask --format json`` prints for this layer."""
        return dict(self._doc)

    def __repr__(self) -> str:
        m, n = self.allowed.shape
        where = "" if self.layer is None else f" layer {self.layer}"
        return f"<qkv mask{where}: {m} x {n}, {self.counts['allowed']} cells may attend; rules {', '.join(self.rules)}>"


@owning_float_errors
def mask(text: str | None = None, model: str | PathLike | object | None = None, *, causal: bool = False,
         window: int | None = None, chunk: int | None = None, context: str | None = None, pad_to: int | None = None,
         tokenizer: str = "word", layer: int | list[int] | None = None, chat: bool = False,
         target: str | None = None, attention: str | None = None) -> Mask | list[Mask]:  # fmt: skip
    """The combined Mask over ``text``'s tokens, each removed cell with the rule that removed it, as ``qkv mask``.

    Parameters
    ----------
    text : the text (default a short sample sentence).
    causal, window, chunk, context, pad_to, tokenizer : random weights: the rules (``window`` n_c, ``chunk``
        n_ch), the context Y of cross-attention, padding to ``pad_to`` keys.
    model : a checkpoint: its own mask over its own tokens; ``layer`` an int (one Mask) or a list, default one
        layer of each kind (a list of Masks); ``chat`` wraps the text in its chat template.
    target, attention : an encoder-decoder: the decoder's text, and which attention (``"encoder"``, ``"decoder"``
        or ``"cross"``, the default).
    """
    if text is not None and not isinstance(text, str):
        raise QkvError(f"text must be a str, got {type(text).__name__}")
    if model is None:
        for name, value in (("layer", layer), ("chat", chat), ("target", target), ("attention", attention)):
            if value is not None and value is not False:
                raise QkvError(f"{name} needs model=: it reads a real checkpoint")
    else:
        given = [k for k, v in {"causal": causal, "window": window, "chunk": chunk, "context": context,
                                "pad_to": pad_to, "tokenizer": tokenizer != "word"}.items() if v]  # fmt: skip
        if given:
            raise QkvError(f"{given[0]} cannot be used with model=: the checkpoint fixes d, the heads, the tokenizer "
                           "and its mask")  # fmt: skip
    one = isinstance(layer, int) and not isinstance(layer, bool)
    layers = [layer] if one else list(layer or [])
    from qkv_cli.api.arguments import chat_of

    masks = [Mask(g) for g in mask_grids(text, model, causal=bool(causal), window=window, chunk=chunk,
                                         context=context, pad_to=pad_to, tokenizer=tokenizer, layers=layers,
                                         chat=chat_of({"chat": chat}), target=target, attention=attention)]  # fmt: skip
    return masks[0] if one or model is None else masks


def mask_grids(text: str | None, model=None, *, file=None, causal: bool = False, window: int | None = None,
               chunk: int | None = None, context: str | None = None, context_file=None, mask_file=None,
               pad_to: int | None = None, tokenizer: str = "word", layers=(), chat=None, target: str | None = None,
               attention: str | None = None, download: bool = False, output=None) -> list:  # fmt: skip
    """The mask grids ``qkv mask`` draws (pipeline.maskgrid.MaskGrid): one for random weights' rules; for a
    checkpoint (a name, a path or a loaded model), one per layer asked or per kind of layer, over `text` as it is
    (default a short sample); for an encoder-decoder (or with target / attention), its chosen attention's. output:
    the JSON to print (core.output_size.Output), refused above its limit before it is made."""
    from qkv_cli.pipeline import maskgrid
    from qkv_cli.pipeline.output_plan import check_mask

    if model is None:
        grids = [maskgrid.for_options(text, file, causal, window, context, context_file, mask_file, pad_to, tokenizer,
                                      chunk)]  # fmt: skip
        check_mask(output, grids)
        return grids
    from qkv_cli.api.arguments import sample_text
    from qkv_cli.api.commands import load

    loaded = model if hasattr(model, "config") and hasattr(model, "family") else load(_spec(model), download=download)
    text = sample_text("short") if text is None else text
    if target is not None or attention is not None or loaded.is_encoder_decoder:
        from qkv_cli.pipeline.encdec.inspection import mask_grid

        grids = mask_grid(loaded, text, target, attention, layers)
    else:
        grids = maskgrid.for_model(loaded, text, layers, chat)
    check_mask(output, grids)
    return grids


def find_models() -> list[dict]:
    """The checkpoints qkv can find, as ``qkv models --format json`` lists them: the Hugging Face cache, installed
    packages that ship one, and the GGUF models of ollama's and LM Studio's stores (each with its family, layers,
    heads and width, or the reason it cannot be read)."""
    from qkv_cli.models import find_models as found

    return found()
