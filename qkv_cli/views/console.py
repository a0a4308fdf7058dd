"""The terminal: one rich Console for stdout, and clean() for every string that came from a file or the user."""

from __future__ import annotations

import re

from rich.console import Console

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def clean(text: str) -> str:
    """Control bytes (escape sequences, bells, NULs) shown as visible escapes: a vocabulary entry or a folder name
    must never drive the terminal."""
    text = str(text)
    return _CONTROL.sub(lambda m: repr(m.group())[1:-1], text) if _CONTROL.search(text) else text


class _Console(Console):
    def on_broken_pipe(self) -> None:  # rich would exit 1; let the CLI stop quietly with 0
        raise BrokenPipeError


def console() -> Console:
    return _Console(highlight=False, soft_wrap=False)
