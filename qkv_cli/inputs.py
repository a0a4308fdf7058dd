"""Where the text comes from: an argument, a file, or stdin. Every failure is a one-line QkvError."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from qkv_cli.errors import QkvError

MAX_TEXT_BYTES = 64 * 2**20  # a text file larger than this is not something to inspect token by token


def is_file_name(path) -> bool:
    """False for '' (Path('') is '.'), blanks, a NUL byte, or characters the filesystem cannot encode."""
    text = str(path)
    if not text.strip() or "\x00" in text:
        return False
    try:
        os.fsencode(text)  # a lone surrogate would make every os call raise UnicodeEncodeError
    except UnicodeError:
        return False
    return True


def read_file(path: str | Path, what: str = "file") -> str:
    if not is_file_name(path):
        raise QkvError(f"{what} {str(path)!r} is not a file name: give the path of a UTF-8 text file")
    p = Path(path)
    if p.is_dir():
        raise QkvError(f"{what} {str(p)!r} is a directory: give a text file")
    try:
        size = p.stat().st_size
        if size > MAX_TEXT_BYTES:
            raise QkvError(f"{what} {str(p)!r} is {size} bytes: at most {MAX_TEXT_BYTES} bytes of text are read")
        data = p.read_bytes()
    except FileNotFoundError:
        raise QkvError(f"{what} {str(p)!r} does not exist") from None
    except PermissionError:
        raise QkvError(f"{what} {str(p)!r} is not readable (permission denied)") from None
    except OSError as exc:
        raise QkvError(f"{what} {str(p)!r} cannot be read: {exc.strerror or exc}") from None
    return decode(data, f"{what} {str(p)!r}")


def decode(data: bytes, source: str) -> str:
    if b"\x00" in data:
        raise QkvError(f"{source} looks binary (it has NUL bytes): give UTF-8 text")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise QkvError(f"{source} is not UTF-8 text (bad byte at offset {exc.start}): convert it to UTF-8") from None


def read_stdin() -> str:
    stream = getattr(sys.stdin, "buffer", None)
    try:
        data = stream.read() if stream is not None else (sys.stdin.read() or "").encode()
    except (OSError, ValueError, AttributeError):
        raise QkvError("stdin is closed: pass TEXT, --file PATH, or pipe text into '-'") from None
    return decode(data, "stdin")


def clean(text: str, source: str) -> str:
    """Control characters other than tab and newline become spaces; empty text is an error."""
    if not text.replace("\n", "").replace("\t", "").isprintable():  # C-speed check; walk only distinct characters
        bad = [c for c in set(text) if not (c in "\t\n" or c.isprintable())]
        if len(bad) > 64:  # many distinct ones: one (slower) pass
            text = text.translate(dict.fromkeys(map(ord, bad), " "))
        else:
            for c in bad:
                text = text.replace(c, " ")
    if not text.strip():
        raise QkvError(f"{source} is empty: give some text to attend over")
    return text


def get_text(text: str | None, file: str | None, default: str | None = None) -> str:
    """TEXT, '-' for stdin, --file PATH, or the default (a sample) when none is given."""
    if text is not None and file is not None:
        raise QkvError("give either TEXT or --file, not both")
    if file is not None:
        return clean(read_file(file) if file != "-" else read_stdin(), f"file {file!r}" if file != "-" else "stdin")
    if text == "-":
        return clean(read_stdin(), "stdin")
    if text is None:
        if default is None:
            raise QkvError("no text: give TEXT, --file PATH, or '-' to read stdin")
        return default
    return clean(text, "TEXT")
