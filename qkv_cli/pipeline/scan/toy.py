"""Seeded random weights (no --model) as a scan's model: one layer of tau heads, each text through the dense
pipeline (pipeline.dense, as `qkv heads TEXT --d D --heads TAU ...` runs it), one text at a time."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np


@dataclass(frozen=True)
class ToyConfig:
    """What a scan asks of a model's config: one layer, tau heads, no length limit of its own."""

    n_heads: int
    n_layers: int = 1
    family: str = "random weights"
    max_positions: int = 1 << 30


class Toy:
    """The random-weights "model" of a scan: settings (core.settings.Settings), tokenize, run one text."""

    name = "random weights"
    is_encoder_decoder = False

    def __init__(self, settings, max_memory: int | None = None):
        self.settings, self.max_memory = settings, max_memory
        self.config = ToyConfig(settings.tau)
        self.dtype = np.dtype(settings.dtype)
        self.tokenizer = settings.tokenizer

    def describe(self) -> dict:
        return asdict(self.settings)

    def tokenize(self, text: str):
        from qkv_cli.text.tokens import tokenize

        return tokenize(text, self.settings.tokenizer)

    def check_length(self, m: int) -> None:
        from qkv_cli.errors import QkvError

        if m < 1:
            raise QkvError("the text has no tokens")

    def check_memory(self, m: int, limit: int) -> None:
        from qkv_cli.core import budget
        from qkv_cli.pipeline.seeded import HINTS, estimate

        budget.check_budget(estimate(m, self.settings), limit, HINTS, dtype=self.settings.dtype)

    def forward_texts(self, items, plan, check_memory) -> list:
        """[(text_id, Tokens)] -> their TextRuns, one text at a time (check_memory: pipeline.scan.block's)."""
        for _, tokens in items:
            check_memory(self, plan, len(tokens.strings))
        return [self.run(tokens) for _, tokens in items]

    def run(self, tokens):
        """One text's TextRun: the layer's weights (1, tau, m, m), its token ids (strings for the word tokenizer,
        as qkv heads takes them), labels, and the allowed grid (the mask), as qkv heads reads them."""
        from qkv_cli.pipeline.scan.batch import TextRun
        from qkv_cli.pipeline.seeded import run

        r = run(" ".join(tokens.strings), self.settings, tokens=tokens, max_memory=self.max_memory)
        ids = np.asarray(tokens.strings if tokens.ids is None else tokens.ids)
        return TextRun(r.weights[None], ids, list(r.labels), allowed=~r.masked)
