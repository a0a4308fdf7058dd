"""The terminal qkv writes to, made safe before anything is printed: a stdout that cannot encode `·`, `…` or `✓`
(PYTHONIOENCODING=ascii, LC_ALL=C) gets ASCII stand-ins instead of an error; a COLUMNS that is not a positive
number is ignored."""

from __future__ import annotations

import codecs
import os
import sys

ASCII = {"·": ".", "…": "...", "✓": "+", "─": "-", "━": "-", "│": "|", "␣": "_", "↵": "\\n", "⇥": "\\t", "⏎": "\\n",
         "␍": "\\r", "∅": "0", "×": "x", "→": "->", "—": "-", "–": "-", "’": "'", "“": '"', "”": '"'}  # fmt: skip


def _ascii(error: UnicodeEncodeError):
    bad = error.object[error.start : error.end]
    return "".join(ASCII.get(c, "?") for c in bad), error.end


def prepare() -> None:
    codecs.register_error("qkv-ascii", _ascii)
    for stream in (sys.stdout, sys.stderr):
        encoding = (getattr(stream, "encoding", None) or "").lower().replace("-", "")
        if encoding not in ("utf8", "utf_8", "utf16", "utf32") and hasattr(stream, "reconfigure"):
            try:
                stream.reconfigure(errors="qkv-ascii")
            except (ValueError, OSError):
                pass
    columns = os.environ.get("COLUMNS")
    if columns is not None and not (columns.isdigit() and int(columns) > 0):
        del os.environ["COLUMNS"]
