"""A corpus for `qkv scan`: many texts, read one at a time (never the whole corpus in memory), every read bounded.

CORPUS is a text file (one text per line), a folder of .txt files (one text each, in name order), a JSON Lines, CSV
or Parquet file (the texts in one field, `text` by default), or '-' (stdin, one text per line). Each record has its
0-based index in the corpus (`text_id`) and where it came from (a line number, a row, a file name). A record that
cannot be read (bad UTF-8, empty, too long, a JSON line without the field) comes back with its problem instead of a
text: the scan records it and goes on. A corpus that is not one (a binary file, a folder without .txt files, a
missing field) is a one-line QkvError before any text is read.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from qkv_cli.errors import QkvError
from qkv_cli.files import is_file_name, remember

MAX_RECORD_BYTES = 1 << 20  # one text: a line, a file, a field (longer ones are recorded as unreadable)
SNIFF_BYTES = 8192  # a NUL byte in a text corpus's first bytes: a binary, not a corpus
KINDS = ("lines", "folder", "jsonl", "csv", "parquet", "stdin")
SUFFIXES = {".jsonl": "jsonl", ".ndjson": "jsonl", ".csv": "csv", ".parquet": "parquet", ".pq": "parquet"}
INSTALL = "pip install 'qkv-cli[scan]'"


@dataclass(frozen=True)
class Record:
    """One text of the corpus: text_id (0-based), where ("line 12", "row 3", "a.txt"), the text or its problem."""

    text_id: int
    where: str
    text: str | None = None
    problem: str | None = None


def resolve(source: str) -> str:
    """`sample:corpus` (sample_texts/corpus/corpus.txt) or `sample:NAME` (a shipped sample, qkv_cli.text.samples) as
    its path; any other CORPUS unchanged."""
    if isinstance(source, str) and source.startswith("sample:"):
        from qkv_cli.text.samples import sample_dir, sample_path

        name = source.removeprefix("sample:").removesuffix(".txt")
        corpus = sample_dir() / "corpus" / f"{name}.txt"
        return str(corpus if "/" not in name and corpus.is_file() else sample_path(name))
    return source


def kind_of(source: str) -> str:
    """Which reader a CORPUS needs (KINDS), from '-', a folder, or the file's suffix (anything else: lines)."""
    if source == "-":
        return "stdin"
    if not is_file_name(source):
        raise QkvError(f"corpus {source!r} is not a file name: give a text file, a folder, JSONL, CSV, Parquet or '-'")
    p = Path(source).expanduser()
    if p.is_dir():
        return "folder"
    if not p.exists():
        raise QkvError(f"corpus {source!r} does not exist")
    if not p.is_file():
        raise QkvError(f"corpus {source!r} is not a regular file (a FIFO or a device): give a file, a folder or '-'")
    return SUFFIXES.get(p.suffix.lower(), "lines")


def records(source: str, field: str = "text", limit: int | None = None) -> Iterator[Record]:
    """The corpus's records in order, at most `limit` of them; checks the corpus itself before the first one."""
    source = resolve(source)
    reader = {"lines": _lines_file, "stdin": _stdin, "folder": _folder, "jsonl": _jsonl, "csv": _csv,
              "parquet": _parquet}[kind_of(source)]  # fmt: skip
    for record in reader(source, field):
        if limit is not None and record.text_id >= limit:
            return
        yield record


def count(source: str, field: str = "text", limit: int | None = None) -> int | None:
    """How many records the corpus holds (for the progress bar's time left): None for stdin. Reads it once more."""
    source = resolve(source)
    if kind_of(source) == "stdin":
        return None
    if kind_of(source) == "parquet":
        total = _parquet_file(source, field).metadata.num_rows
    elif kind_of(source) == "folder":
        total = len(_texts_of(source))
    else:
        total = sum(1 for _ in records(source, field))
    return total if limit is None else min(total, limit)


def text_of(data: bytes, where: str) -> tuple[str | None, str | None]:
    """(the cleaned text, None) or (None, the problem) of one record's bytes."""
    if len(data) > MAX_RECORD_BYTES:
        return None, f"{where}: longer than {MAX_RECORD_BYTES} bytes"
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return None, f"{where}: not UTF-8 (bad byte at offset {exc.start})"
    return checked(text, where)


def checked(text: str, where: str) -> tuple[str | None, str | None]:
    """Control characters become spaces (as for TEXT); an empty text is a problem."""
    from qkv_cli.text.inputs import clean

    text = text.strip().lstrip("\ufeff")
    if not text:
        return None, f"{where}: empty"
    return clean(text, where), None


def _record(i: int, where: str, data: bytes) -> Record:
    text, problem = text_of(data, where)
    return Record(i, where, text, problem)


def _open(source: str):
    try:
        handle = open(Path(source).expanduser(), "rb")
    except PermissionError:
        raise QkvError(f"corpus {source!r} is not readable (permission denied)") from None
    except OSError as exc:
        raise QkvError(f"corpus {source!r} cannot be read: {exc.strerror or exc}") from None
    remember(handle)
    head = handle.peek(SNIFF_BYTES)[:SNIFF_BYTES] if hasattr(handle, "peek") else b""
    if b"\x00" in head:
        handle.close()
        raise QkvError(f"corpus {source!r} looks binary (it has NUL bytes): give UTF-8 text, one text per line")
    return handle


def _bounded_lines(handle) -> Iterator[bytes]:
    """Each line's bytes (without its end); a line past MAX_RECORD_BYTES is cut there (the rest skipped) and comes
    back one byte too long, so text_of records it as too long."""
    while True:
        line = handle.readline(MAX_RECORD_BYTES + 1)
        if not line:
            return
        if len(line) > MAX_RECORD_BYTES and not line.endswith(b"\n"):
            while (rest := handle.readline(MAX_RECORD_BYTES)) and not rest.endswith(b"\n"):
                pass
        yield line.rstrip(b"\r\n")


def _lines(handle, what: str) -> Iterator[Record]:
    any_line = False
    for i, line in enumerate(_bounded_lines(handle)):
        any_line = True
        yield _record(i, f"line {i + 1}", line.removeprefix(b"\xef\xbb\xbf") if i == 0 else line)
    if not any_line:
        raise QkvError(f"{what} is empty: give one text per line")


def _lines_file(source: str, field: str) -> Iterator[Record]:
    with _open(source) as handle:
        yield from _lines(handle, f"corpus {source!r}")


def _stdin(source: str, field: str) -> Iterator[Record]:
    stream = getattr(sys.stdin, "buffer", None)
    if stream is None:
        raise QkvError("stdin is closed: pipe one text per line into '-'")
    yield from _lines(stream, "stdin")


def _texts_of(source: str) -> list[Path]:
    found = sorted(p for p in Path(source).expanduser().iterdir() if p.suffix.lower() == ".txt" and p.is_file())
    if not found:
        raise QkvError(f"corpus folder {source!r} has no .txt files: give a folder of .txt files (one text each)")
    return found


def _folder(source: str, field: str) -> Iterator[Record]:
    for i, path in enumerate(_texts_of(source)):
        try:
            with open(path, "rb") as handle:
                remember(handle)
                data = handle.read(MAX_RECORD_BYTES + 1)
        except OSError as exc:
            yield Record(i, path.name, problem=f"{path.name}: cannot be read ({exc.strerror or exc})")
            continue
        if b"\x00" in data:
            yield Record(i, path.name, problem=f"{path.name}: binary (NUL bytes)")
            continue
        yield _record(i, path.name, data.removeprefix(b"\xef\xbb\xbf"))


def _jsonl(source: str, field: str) -> Iterator[Record]:
    with _open(source) as handle:
        for i, line in enumerate(_bounded_lines(handle)):
            where = f"line {i + 1}"
            if len(line) > MAX_RECORD_BYTES:
                yield Record(i, where, problem=f"{where}: longer than {MAX_RECORD_BYTES} bytes")
                continue
            try:
                value = json.loads(line.decode("utf-8"))
            except UnicodeDecodeError as exc:
                yield Record(i, where, problem=f"{where}: not UTF-8 (bad byte at offset {exc.start})")
                continue
            except (json.JSONDecodeError, RecursionError):
                yield Record(i, where, problem=f"{where}: not a JSON object")
                continue
            if not isinstance(value, dict) or not isinstance(value.get(field), str):
                yield Record(i, where, problem=f"{where}: no string field {field!r}")
                continue
            text, problem = checked(value[field], where)
            yield Record(i, where, text, problem)


def _csv(source: str, field: str) -> Iterator[Record]:
    import csv

    problems: dict[int, str] = {}

    def decoded(handle):
        for n, line in enumerate(_bounded_lines(handle)):
            try:
                text = line.decode("utf-8") if len(line) <= MAX_RECORD_BYTES else None
            except UnicodeDecodeError as exc:
                text = None
                problems[n + 1] = f"line {n + 1}: not UTF-8 (bad byte at offset {exc.start})"
            if text is None:
                problems.setdefault(n + 1, f"line {n + 1}: longer than {MAX_RECORD_BYTES} bytes")
            yield (text or "") + "\n"  # the line end: a quoted field keeps its newlines

    with _open(source) as handle:
        rows = csv.reader(decoded(handle))
        header = next(rows, None)
        if not header or field not in header:
            columns = ", ".join(repr(c) for c in header or [])
            raise QkvError(
                f"corpus {source!r} has no column {field!r} (its columns: {columns or 'none'}): --field NAME"
            )
        at = header.index(field)
        try:
            for i, row in enumerate(rows):
                where = f"line {rows.line_num}"
                if rows.line_num in problems:
                    yield Record(i, where, problem=problems.pop(rows.line_num))
                elif at >= len(row):
                    yield Record(i, where, problem=f"{where}: no {field!r} value")
                else:
                    text, problem = checked(row[at], where)
                    yield Record(i, where, text, problem)
        except csv.Error as exc:
            raise QkvError(f"corpus {source!r} is not valid CSV at line {rows.line_num}: {exc}") from None


def _parquet_file(source: str, field: str):
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise QkvError(f"reading a Parquet corpus needs pyarrow: {INSTALL}") from None
    try:
        f = pq.ParquetFile(str(Path(source).expanduser()))
    except Exception as exc:  # pyarrow's ArrowInvalid and OSError: not a Parquet file
        raise QkvError(f"corpus {source!r} is not a Parquet file ({str(exc).splitlines()[0][:120]})") from None
    names = f.schema_arrow.names
    if field not in names:
        raise QkvError(f"corpus {source!r} has no column {field!r} (its columns: {', '.join(names)}): --field NAME")
    return f


def _parquet(source: str, field: str) -> Iterator[Record]:
    f = _parquet_file(source, field)
    i = 0
    for batch in f.iter_batches(batch_size=1024, columns=[field]):
        for value in batch.column(0).to_pylist():
            where = f"row {i + 1}"
            if not isinstance(value, str):
                yield Record(i, where, problem=f"{where}: {field!r} is not a string")
            elif len(value.encode("utf-8")) > MAX_RECORD_BYTES:
                yield Record(i, where, problem=f"{where}: longer than {MAX_RECORD_BYTES} bytes")
            else:
                text, problem = checked(value, where)
                yield Record(i, where, text, problem)
            i += 1
