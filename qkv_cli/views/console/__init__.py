"""The terminal: one rich Console for stdout, and clean() for every string that came from a file or the user.

On a terminal, rich fits the output to its width. Into a file or a pipe nothing is cut to 80 columns: tables
keep every column (or fit the width COLUMNS gives), and no line ends in spaces."""

from __future__ import annotations

import os
import re
from functools import cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_TRAILING = re.compile(r" +(?=\n)")
WIDE = 1 << 15  # the width of a file or a pipe: wide enough for every column of a windowed table


def clean(text: str) -> str:
    """Control bytes (escape sequences, bells, NULs) shown as visible escapes: a vocabulary entry or a folder name
    must never drive the terminal."""
    text = str(text)
    return _CONTROL.sub(lambda m: repr(m.group())[1:-1], text) if _CONTROL.search(text) else text


@cache
def _console_class():  # rich is imported here, not with the module: clean() serves commands that draw only
    from rich.console import Console

    class _Console(Console):
        def on_broken_pipe(self) -> None:  # rich would exit 1; let the CLI stop quietly with 0
            raise BrokenPipeError

        def _render_buffer(self, buffer) -> str:
            """Off a terminal, the spaces rich pads lines with are dropped (a saved table diffs and greps cleanly).
            (rich's hook between rendering and writing; tests/views/test_tables.py checks a file has no trailing
            space.)"""
            text = super()._render_buffer(buffer)
            return text if self.is_terminal else _TRAILING.sub("", text)

    return _Console


def console() -> Console:
    out = _console_class()(highlight=False, soft_wrap=False)
    columns = os.environ.get("COLUMNS", "")
    if not out.is_terminal and not (columns.isdigit() and int(columns) > 0):
        out.width = WIDE
    return out
