"""Writing files: checked before any work, written to a temporary file and renamed, never half-written."""

from __future__ import annotations

import os
import tempfile
from contextlib import contextmanager
from pathlib import Path

from qkv_cli.errors import QkvError
from qkv_cli.files import is_file_name


def check_output_path(path: str | Path, suffixes: tuple[str, ...] | None = None) -> Path:
    """Fail before any work if the file could not be written: bad extension, missing folder, a directory."""
    p = Path(path)
    if not is_file_name(path):
        raise QkvError(f"cannot write {str(path)!r}: it is not a file name")
    if suffixes is not None and p.suffix.lower() not in suffixes:
        raise QkvError(f"cannot write {str(p)!r}: the extension must be one of {', '.join(suffixes)}")
    if p.is_dir():
        raise QkvError(f"cannot write {str(p)!r}: it is a directory; give a file name")
    folder = p.parent if str(p.parent) else Path(".")
    if not folder.is_dir():
        raise QkvError(f"cannot write {str(p)!r}: folder {str(folder)!r} does not exist")
    if not os.access(folder, os.W_OK):
        raise QkvError(f"cannot write {str(p)!r}: folder {str(folder)!r} is not writable")
    return p


@contextmanager
def atomic_write(path: str | Path, mode: str = "wb"):
    """Yield a temporary file beside `path`; rename it over `path` only if the block finishes."""
    p = Path(path)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent if str(p.parent) else ".")
    except OSError as exc:
        raise QkvError(f"cannot write {str(p)!r}: {exc.strerror or exc}") from None
    try:
        with os.fdopen(fd, mode) as handle:
            yield handle
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; give the file the usual permissions
        os.replace(tmp, p)
    except OSError as exc:
        _remove(tmp)
        raise QkvError(f"cannot write {str(p)!r}: {exc.strerror or exc}") from None
    except BaseException:
        _remove(tmp)
        raise


def save_npz(arrays: dict, path: str | Path) -> Path:
    """np.savez of `arrays` to `path`, atomically."""
    import numpy as np

    p = check_output_path(path)
    with atomic_write(p) as handle:
        np.savez(handle, **arrays)
    return p


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
