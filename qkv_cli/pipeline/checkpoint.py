"""`--model`: load a real checkpoint and run it, keeping every layer's weights and the chosen layers' detail."""

from __future__ import annotations

import numpy as np

from qkv_cli.core import budget
from qkv_cli.core.result import Result

HINTS = "fewer --layer, --dtype float32, or a shorter text"  # the batch and probe runs


def load(spec: str, dtype: str, download: bool = False, max_memory: int | None = None):
    """The Model behind --model SPEC (a folder, a cache name, an installed package, an ollama or LM
    Studio name), weights in `dtype`."""
    from qkv_cli.models import load_model, resolve_model
    from qkv_cli.models.formats.stores import name_of

    limit = budget.default_max_memory() if max_memory is None else max_memory
    return load_model(resolve_model(spec, download=download), dtype=dtype, name=name_of(spec), max_memory=limit)


def chosen_layers(model, layers, all_layers: bool) -> list[int]:
    """--layer L (repeatable, -1 = last); without it every layer (all_layers) or the last one."""
    from qkv_cli.models import select_layers

    n = model.config.n_layers
    if layers:
        return select_layers(list(layers), n)
    return list(range(n)) if all_layers else [n - 1]


def check_memory(model, activations: int, limit: int, hints: str, what: str = "this run", given=()) -> None:
    """Refuse a run whose weights and activations exceed the budget. A streamed model (models.formats.stream) first lets
    as many layers stay resident as the budget holds beside the activations, then counts what its weights hold at
    most: the resident layers, the two being read and the head."""
    model.fit_weights(limit - activations)
    budget.check_budget(model.weights_bytes + activations, limit, hints, what=what, dtype=model.dtype, given=given)


def run(model, text: str, layers=None, all_layers: bool = False, kernel: str = "vectorized",
        max_memory: int | None = None, detail: bool = True, chat=None, rows=None,
        narrow: bool = False, heads=None, output=None, on_layer=None) -> Result:  # fmt: skip
    """Forward `text` (in a chat template with chat): a MODEL Result with a LAYER Result for each chosen layer
    (none without detail). Every layer's attention is kept; with narrow (views that read attention_layers) only
    the chosen layers' when every layer's does not fit the budget. rows ("A:B", a slice over the query
    positions): only those queries' weights are kept; heads (--head): only those heads' (None: every head).
    output (core.output_size.Output): the JSON or CSV to print, refused before the forward above its limit;
    on_layer(l, LayerResult): each detailed layer as it is made (written, then dropped: see Model.forward)."""
    from qkv_cli.models.select import select_rows
    from qkv_cli.pipeline import output_plan
    from qkv_cli.pipeline.chat import prompt

    chosen = chosen_layers(model, layers, all_layers) if detail else []
    said = prompt(model, text, chat)
    tokens = said.tokens
    m = len(tokens)
    span = select_rows(rows, m)
    limit = budget.default_max_memory() if max_memory is None else max_memory
    held = len(chosen) if on_layer is None else min(2, len(chosen))  # written layer by layer: the first and one
    plan = Plan(model, m, held, span, limit, given=_given(layers, rows, model.dtype), heads=heads)
    keep = plan.keep(chosen) if narrow else None
    keep = output_plan.narrowed(output, model, tokens, chosen, keep, span) if narrow else keep
    plan.check(keep)  # the memory first, then what the output will print: both before any layer's weight is read
    output_plan.check_checkpoint(output, model, tokens, chosen, keep, span, _given(layers, rows, model.dtype))
    ids = np.asarray(tokens.ids, dtype=np.int64)
    out = model.forward(ids, layers=chosen, kernel=kernel, tokens=tokens, keep=keep, rows=rows, heads=heads,
                        on_layer=on_layer)  # fmt: skip
    out.chat = said if chat is not None else None
    return out


def _given(layers, rows, dtype) -> set[str]:
    """The options a refusal must not offer again."""
    return {name for name, on in (("layer", bool(layers)), ("rows", rows is not None),
                                  ("dtype", np.dtype(dtype) == np.float32)) if on}  # fmt: skip


class Plan:
    """What a checkpoint run keeps, sized before it runs: every layer's attention when the budget holds it, else
    the chosen layers'; a refusal gives each option's figure (never one already given)."""

    def __init__(self, model, m: int, detailed: int, span, limit: int, given: set[str], heads=None):
        self.model, self.m, self.detailed, self.span, self.limit, self.given = model, m, detailed, span, limit, given
        self.heads = None if heads is None else len(heads)
        self.rows = None if span is None else span[1] - span[0]

    def activations(self, kept: int, rows="same", dtype=None, detailed=None) -> int:
        from qkv_cli.models import estimate_bytes

        rows = self.rows if rows == "same" else rows
        detailed = self.detailed if detailed is None else detailed
        return estimate_bytes(self.model.config, self.m, dtype or self.model.dtype, detailed, kept, rows, self.heads)

    def total(self, activations: int, itemsize_ratio: float = 1.0) -> int:
        """Weights (a streamed model: as many layers resident as fit, at least the two being read) + activations."""
        self.model.fit_weights(self.limit - activations)
        return int(self.model.weights_bytes * itemsize_ratio) + activations

    def keep(self, chosen: list[int]):
        """None (every layer) when it fits, else the chosen layers."""
        L = self.model.config.n_layers
        if len(chosen) < L and self.total(self.activations(L)) > self.limit:
            return list(chosen)
        return None

    def check(self, keep) -> None:
        kept = self.model.config.n_layers if keep is None else len(keep)
        needed = self.total(self.activations(kept))
        if needed > self.limit:
            L = self.model.config.n_layers
            what = "every layer's" if kept == L else ("one layer's" if kept == 1 else f"{kept} layers'")
            what = f"this run ({self.m:,} tokens, {what} attention)"
            budget.check_budget(needed, self.limit, self.hints(kept), what=what)

    def hints(self, kept: int) -> str:
        """Each option not given, with the figure it would bring the run to: "--layer -1 (1.2 GB), ..."."""
        human = budget.human
        out = []
        if kept > 1 and "layer" not in self.given:
            one = self.activations(1, detailed=min(1, self.detailed))
            out.append(f"--layer -1 (one layer's attention: {human(self.total(one))})")
        if "rows" not in self.given and self.m > 128:
            out.append(f"--rows -128: (the last 128 queries: {human(self.total(self.activations(kept, 128)))})")
        if "dtype" not in self.given:
            act = self.activations(kept, dtype=np.float32)
            ratio = np.dtype(np.float32).itemsize / self.model.dtype.itemsize
            out.append(f"--dtype float32 ({human(self.total(act, ratio))})")
        self.model.fit_weights(0)
        out.append("a shorter text" if self.model.weights_bytes < self.limit else "a smaller model")
        return ", ".join(out[:-1]) + (", or " if len(out) > 1 else "") + out[-1]
