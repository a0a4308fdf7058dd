"""`qkv mask`: which rule removes each (query i, key t) cell, for the options given or for a checkpoint's layers."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from qkv_cli.core import masks
from qkv_cli.errors import QkvError

MAX_CELLS = 2**22  # `qkv mask` shows every cell: beyond 2048 x 2048 the grids and their JSON take minutes and GBs


def check_cells(m: int, n: int) -> None:
    """Refuse a grid too large to show before any of it is allocated."""
    if m * n > MAX_CELLS:
        raise QkvError(f"the mask would have m x n = {m} x {n} = {m * n} cells: at most {MAX_CELLS} are shown; "
                       "use a shorter text or a smaller --pad-to")  # fmt: skip


@dataclass
class MaskGrid:
    """The combined Mask of one attention layer: rule grids (True = removed) and the cells that may attend."""

    labels: list[str]
    key_labels: list[str]
    grids: dict  # rule -> (m, n) bool
    window: int | None = None
    model: dict | None = None  # {"name", "family"} of a checkpoint whose own tokens these are
    layer: int | None = None
    layer_type: str = ""
    chat: object = None  # pipeline.chat.Prompt with --chat
    chunk: int | None = None  # n_ch of a chunked layer (Llama 4), or of --chunk
    allowed: np.ndarray = field(init=False)

    def __post_init__(self):
        self.allowed = masks.allowed_grid(self.grids, len(self.labels), len(self.key_labels))


def for_options(text, file, causal, window, context, context_file, mask_file, pad_to, tokenizer,
                chunk=None) -> MaskGrid:  # fmt: skip
    """The Mask the random-weights options make over TEXT (a sample without it)."""
    from qkv_cli.core.settings import Settings
    from qkv_cli.pipeline.seeded import check_cross
    from qkv_cli.text.inputs import get_context, get_text
    from qkv_cli.text.maskfile import load_mask_file
    from qkv_cli.text.samples import sample_text
    from qkv_cli.text.tokens import tokenize

    has_context = context is not None or context_file is not None
    if window is not None:
        masks.check_window(window)
    if chunk is not None:
        masks.check_chunk(chunk)
    if has_context:
        check_cross(Settings(d=1, tau=1, causal=causal, window=window, chunk=chunk), True)
    custom = None if mask_file is None else load_mask_file(mask_file)
    ctx = get_context(context, context_file, text == "-" or file == "-")
    labels = list(tokenize(get_text(text, file, sample_text("short")), tokenizer).labels)
    key_labels = labels if ctx is None else list(tokenize(ctx, tokenizer).labels)
    m, n = len(labels), len(key_labels)
    padding = None
    if pad_to is not None:
        if pad_to < n:
            raise QkvError(
                f"--pad-to {pad_to} is shorter than the {'context' if ctx else 'text'} ({n} tokens): use {n} or more"
            )
        check_cells(m if ctx else pad_to, pad_to)
        pad = ["[PAD]"] * (pad_to - n)
        if ctx is None:
            labels = labels + pad
            m = pad_to
        key_labels = key_labels + pad
        n = pad_to
        padding = np.arange(n) >= n - len(pad)
    check_cells(m, n)
    if custom is not None:
        masks.check_shape(custom, m, n, f"--mask-file {mask_file!r}")
    spec = masks.MaskSpec(causal=causal, window=window, chunk=chunk, padding=padding, custom=custom)
    return MaskGrid(labels, key_labels, masks.rule_grids(spec, m, n), window, chunk=chunk)


def for_model(model, text: str, layers=(), chat=None) -> list[MaskGrid]:
    """A checkpoint's own Mask over its own tokens (in a chat template with chat), one grid per chosen layer
    (default: each kind of layer once)."""
    from qkv_cli.models import select_layers
    from qkv_cli.pipeline.chat import prompt

    said = prompt(model, text, chat)
    labels = list(said.tokens.labels)
    m = len(labels)
    check_cells(m, m)
    c, fam = model.config, model.family
    chosen = select_layers(list(layers), c.n_layers) if layers else _one_per_kind(c, fam)
    info = {"name": model.name, "family": c.family}
    out = []
    for layer in chosen:
        spec = fam.layer_mask(c, layer)
        grid = MaskGrid(labels, labels, masks.rule_grids(spec, m, m), spec.window, info, layer,
                        fam.layer_type(c, layer), said if chat is not None else None, spec.chunk)  # fmt: skip
        out.append(grid)
    return out


def _one_per_kind(c, fam) -> list[int]:
    """The first layer of each distinct mask (all layers alike: layer 0 only)."""
    seen, chosen = set(), []
    for layer in range(c.n_layers):
        spec = fam.layer_mask(c, layer)
        key = spec.key
        if key not in seen:
            seen.add(key)
            chosen.append(layer)
    return chosen
