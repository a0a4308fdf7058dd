"""Where the text comes from: an argument, a file, or stdin; and the --context text. Every read is bounded.

A file or stdin is read up to its cap plus one byte, never further (st_size is 0 for /dev/zero and pipes, so it
cannot be trusted); anything longer is refused. Every failure is a one-line QkvError.
"""

from __future__ import annotations

import sys
from pathlib import Path

from qkv_cli.errors import QkvError
from qkv_cli.files import is_file_name, read_stream, remember

MAX_TEXT_BYTES = 64 * 2**20  # a text file larger than this is not something to inspect token by token
MAX_SENTENCES = 10_000


def read_bytes(path, what: str, limit: int = MAX_TEXT_BYTES, hint: str = "give a UTF-8 text file") -> bytes:
    """The bytes of a file, at most `limit` of them; a directory, a missing or unreadable file is a QkvError."""
    if not is_file_name(path):
        raise QkvError(f"{what} is not a file name: {hint}")
    try:
        p = Path(path).expanduser()
        if p.is_dir():
            raise QkvError(f"{what} is a directory: {hint}")
        with open(p, "rb") as handle:
            remember(handle)
            return read_stream(handle, limit, what)
    except FileNotFoundError:
        raise QkvError(f"{what} does not exist") from None
    except PermissionError:
        raise QkvError(f"{what} is not readable (permission denied)") from None
    except OSError as exc:
        raise QkvError(f"{what} cannot be read: {exc.strerror or exc}") from None
    except RuntimeError:  # ~nosuchuser: no home directory to expand
        raise QkvError(f"{what}: the home directory in it cannot be found") from None


SAMPLE_PREFIX = "sample:"  # --file sample:coreference reads a shipped sample, from any directory


def read_file(path: str | Path, what: str = "file") -> str:
    """A UTF-8 text file, or a shipped sample named `sample:NAME` (qkv_cli.text.samples)."""
    if isinstance(path, str) and path.startswith(SAMPLE_PREFIX):
        from qkv_cli.text.samples import sample_text

        return sample_text(path[len(SAMPLE_PREFIX) :])
    source = f"{what} {str(path)!r}"
    return decode(read_bytes(path, source, MAX_TEXT_BYTES, "give a text file"), source)


def decode(data: bytes, source: str) -> str:
    if b"\x00" in data:
        raise QkvError(f"{source} looks binary (it has NUL bytes): give UTF-8 text")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise QkvError(f"{source} is not UTF-8 text (bad byte at offset {exc.start}): convert it to UTF-8") from None


_stdin: tuple[object, str] | None = None  # (the stream, its text): each stdin is read once, its text then reused


def read_stdin() -> str:
    """stdin's text, read once (up to MAX_TEXT_BYTES): a second call on the same stream returns the same text, so a
    command can count its output from the text before the run reads it again."""
    global _stdin
    if _stdin is not None and _stdin[0] is sys.stdin:
        return _stdin[1]
    stream = getattr(sys.stdin, "buffer", None)
    try:
        if stream is None:
            data = (sys.stdin.read(MAX_TEXT_BYTES + 1) or "").encode()
            if len(data) > MAX_TEXT_BYTES:
                raise QkvError(f"stdin is larger than {MAX_TEXT_BYTES} bytes: at most {MAX_TEXT_BYTES} bytes are read")
        else:
            data = read_stream(stream, MAX_TEXT_BYTES, "stdin")
    except (OSError, ValueError, AttributeError):
        raise QkvError("stdin is closed: pass TEXT, --file PATH, or pipe text into '-'") from None
    text = decode(data, "stdin")
    _stdin = (sys.stdin, text)
    return text


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


def get_context(context: str | None, context_file: str | None, text_from_stdin: bool = False) -> str | None:
    """The context text from --context TEXT or --context-file PATH ('-' = stdin); None without either."""
    if context is not None and context_file is not None:
        raise QkvError("give either --context or --context-file, not both")
    if context_file is not None:
        if context_file == "-":
            if text_from_stdin:
                raise QkvError("stdin can be read once: give the text or the context (--context-file) another way")
            return clean(read_stdin(), "stdin (--context-file -)")
        return clean(read_file(context_file, "--context-file"), f"--context-file {context_file!r}")
    if context is not None:
        return clean(context, "--context")
    return None


def sentences(text: str, what: str = "--batch") -> list[str]:
    """One sentence per non-empty line."""
    lines = [line.strip() for line in text.splitlines()]
    lines = [line for line in lines if line]
    if not lines:
        raise QkvError(f"{what} needs at least one non-empty line (one sentence per line)")
    if len(lines) > MAX_SENTENCES:
        raise QkvError(f"{what} got {len(lines)} lines: at most {MAX_SENTENCES} sentences")
    return lines
