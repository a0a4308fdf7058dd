"""`--model`: load a real checkpoint and run it, keeping every layer's weights and the chosen layers' detail."""

from __future__ import annotations

import numpy as np

from qkv_cli.core import budget
from qkv_cli.core.result import Result

HINTS = "fewer --layer, --dtype float32, or a shorter text"


def load(spec: str, dtype: str, download: bool = False, max_memory: int | None = None):
    """The Model behind --model SPEC (a folder, a cache name or an installed package), weights in `dtype`."""
    from qkv_cli.models import load_model, resolve_model

    limit = budget.default_max_memory() if max_memory is None else max_memory
    return load_model(resolve_model(spec, download=download), dtype=dtype, max_memory=limit)


def chosen_layers(model, layers, all_layers: bool) -> list[int]:
    """--layer L (repeatable, -1 = last); without it every layer (all_layers) or the last one."""
    from qkv_cli.models import select_layers

    n = model.config.n_layers
    if layers:
        return select_layers(list(layers), n)
    return list(range(n)) if all_layers else [n - 1]


def check_memory(model, activations: int, limit: int, hints: str, what: str = "this run", given=()) -> None:
    """Refuse a run whose weights and activations exceed the budget. A streamed model (models.stream) first lets
    as many layers stay resident as the budget holds beside the activations, then counts what its weights hold at
    most: the resident layers, the two being read and the head."""
    model.fit_weights(limit - activations)
    budget.check_budget(model.weights_bytes + activations, limit, hints, what=what, dtype=model.dtype, given=given)


def run(model, text: str, layers=None, all_layers: bool = False, kernel: str = "vectorized",
        max_memory: int | None = None, detail: bool = True, chat=None) -> Result:  # fmt: skip
    """Forward `text` (in a chat template with chat): a MODEL Result with a LAYER Result for each chosen layer
    (none without detail)."""
    from qkv_cli.models import estimate_bytes
    from qkv_cli.pipeline.chat import prompt

    chosen = chosen_layers(model, layers, all_layers) if detail else []
    said = prompt(model, text, chat)
    tokens = said.tokens
    limit = budget.default_max_memory() if max_memory is None else max_memory
    check_memory(model, estimate_bytes(model.config, len(tokens), model.dtype, len(chosen)), limit, HINTS,
                 given=("fewer --layer",) if len(chosen) <= 1 else ())  # fmt: skip
    out = model.forward(np.asarray(tokens.ids, dtype=np.int64), layers=chosen, kernel=kernel, tokens=tokens)
    out.chat = said if chat is not None else None
    return out
