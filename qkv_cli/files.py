"""Files as untrusted input, shared by every part (like errors.py; standard library only): names checked, reads
bounded, model files opened only when they are regular files, paths kept inside their folder, JSON depth bounded.
Every failure is a one-line QkvError. Writing is the views' job (views/files.py)."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

from qkv_cli.errors import QkvError

_READ: set[tuple[int, int]] = set()  # (device, inode) of every file read: an output may never replace one
_DECLARED: set[str] = set()  # input paths named on the command line, before they are read


def remember(handle) -> None:
    """Note an open input file, so that no output of this run can replace it."""
    try:
        st = os.fstat(handle.fileno())
    except (OSError, ValueError, AttributeError):
        return
    if stat.S_ISREG(st.st_mode):
        _READ.add((st.st_dev, st.st_ino))


def declare_inputs(paths) -> None:
    """Input paths given as options (--file, --mask-file, --tokenizer, --model ...): an output may not be one."""
    for path in paths:
        if path and path != "-" and is_file_name(path):
            _DECLARED.add(os.path.realpath(os.path.expanduser(str(path))))


def is_input(path) -> bool:
    """Whether `path` is a file this run reads (or was told it will read)."""
    real = os.path.realpath(path)
    if real in _DECLARED or any(real.startswith(d + os.sep) for d in _DECLARED):
        return True
    try:
        st = os.stat(real)
    except OSError:
        return False
    return (st.st_dev, st.st_ino) in _READ


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


def read_stream(stream, limit: int, what: str) -> bytes:
    """At most limit bytes from an open binary stream; one byte more is an error naming the limit."""
    data = stream.read(limit + 1)
    if len(data) > limit:
        raise QkvError(f"{what} is larger than {limit} bytes: at most {limit} bytes are read")
    return data


def inside(folder: Path, relative: str, what: str) -> Path:
    """folder / relative, refusing absolute paths and any '..' that would leave the folder."""
    if not isinstance(relative, str) or not relative or "\x00" in relative:
        raise QkvError(f"{what}: {relative!r} is not a file name")
    rel = Path(relative)
    if rel.is_absolute() or ".." in rel.parts:
        raise QkvError(f"{what}: {relative!r} points outside the model folder '{folder}'")
    return folder / rel


def open_regular(path: Path, what: str):
    """Open a regular file for reading (never a FIFO, a device or a directory), following symlinks."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise QkvError(f"{what} '{path}' does not exist") from None
    except OSError as exc:
        raise QkvError(f"cannot read {what} '{path}': {exc.strerror or exc}") from None
    if stat.S_ISDIR(st.st_mode):
        raise QkvError(f"{what} '{path}' is a directory, not a file")
    if not stat.S_ISREG(st.st_mode):
        raise QkvError(f"{what} '{path}' is not a regular file (a FIFO or a device): refused")
    try:
        handle = open(path, "rb")
    except OSError as exc:
        raise QkvError(f"cannot read {what} '{path}': {exc.strerror or exc}") from None
    remember(handle)
    return handle


def read_regular(path: Path, limit: int, what: str) -> bytes:
    """The bytes of a regular file, at most `limit` of them."""
    with open_regular(path, what) as handle:
        try:
            return read_stream(handle, limit, f"{what} '{path}'")
        except OSError as exc:
            raise QkvError(f"cannot read {what} '{path}': {exc.strerror or exc}") from None


def parse_json(data: bytes, where: str):
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise QkvError(f"'{where}' is not UTF-8 text (bad byte at offset {exc.start})") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise QkvError(f"'{where}' is not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None
    except RecursionError:
        raise QkvError(f"'{where}' is nested too deeply to be a model file") from None


def read_json(path: Path, limit: int, missing: str | None = None, what: str = "JSON file"):
    """A bounded, regular JSON file; `missing` is the message when it does not exist."""
    if missing is not None and not os.path.lexists(path):
        raise QkvError(missing)
    return parse_json(read_regular(Path(path), limit, what), str(path))
