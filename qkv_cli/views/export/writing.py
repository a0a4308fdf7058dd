"""Writing files: checked before any work, written to a temporary file and renamed, never half-written.

Only regular files are written: a device, a FIFO or a directory is refused (a symlink is followed to its regular
target, which is replaced; the link stays). A file this run reads is never an output. A file that exists keeps its
permissions; a read-only one is refused. SIGINT, SIGTERM and SIGHUP end the run through an exception (see
qkv_cli/__main__.py), so the temporary file is removed on every exit; they are held back for the moment between
creating the temporary file and knowing its name.
"""

from __future__ import annotations

import os
import signal
import stat
import tempfile
from contextlib import contextmanager
from pathlib import Path

from qkv_cli.errors import QkvError
from qkv_cli.files import is_file_name, is_input

NAME_MAX = 255
STOPPING = {signal.SIGINT, signal.SIGTERM, *([signal.SIGHUP] if hasattr(signal, "SIGHUP") else [])}


def _refuse(p, why: str) -> QkvError:
    return QkvError(f"cannot write {str(p)!r}: {why}")


def target(path) -> tuple[Path, os.stat_result | None]:
    """The file a write to `path` replaces (symlinks followed) and its status, or None when it does not exist."""
    real = Path(os.path.realpath(os.path.expanduser(str(path))))
    try:
        return real, os.stat(real)
    except (FileNotFoundError, NotADirectoryError):  # nothing there yet (the folder check names a missing folder)
        return real, None
    except OSError as exc:
        raise _refuse(path, exc.strerror or str(exc)) from None


def check_output_path(path: str | Path, suffixes: tuple[str, ...] | None = None) -> Path:
    """Fail before any work if the file could not be written: bad name or extension, missing or unwritable
    folder, a directory, a device or FIFO, a read-only file, or one of this run's inputs."""
    if not is_file_name(path):
        raise _refuse(path, "it is not a file name")
    p = Path(path)
    if suffixes is not None and p.suffix.lower() not in suffixes:
        raise _refuse(p, f"the extension must be one of {', '.join(suffixes)}")
    real, st = target(p)
    if st is not None:
        if stat.S_ISDIR(st.st_mode):
            raise _refuse(p, "it is a directory; give a file name")
        if not stat.S_ISREG(st.st_mode):
            raise _refuse(p, "it is not a regular file (a device, a FIFO or a socket): qkv writes only regular files")
        if not st.st_mode & 0o222:
            raise _refuse(p, "it is read-only (make it writable, or choose another name)")
        if _is_terminal_stream(st):
            raise _refuse(p, "it is this run's standard output or error (a link such as /proc/self/fd/1)")
    if is_input(real):
        raise _refuse(p, "it is one of this run's inputs")
    if len(os.fsencode(real.name)) > NAME_MAX:
        raise _refuse(p, f"the file name is longer than {NAME_MAX} bytes")
    folder = real.parent
    if not folder.is_dir():
        raise _refuse(p, f"folder {str(p.parent)!r} does not exist")
    if not os.access(folder, os.W_OK):
        raise _refuse(p, f"folder {str(p.parent)!r} is not writable")
    return p


@contextmanager
def _held_signals():
    """SIGINT, SIGTERM and SIGHUP recorded instead of handled while the block runs, then raised: a signal mask
    would hold them back in this thread only, and any thread (BLAS, the tokenizer's) may receive a process signal,
    whose Python handler then runs here at once. The signals' handlers can only be changed on the main thread; on
    another, the block runs as it is."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    got: list[int] = []
    handlers = {s: signal.signal(s, lambda signum, frame: got.append(signum)) for s in STOPPING}
    try:
        yield
    finally:
        for s, handler in handlers.items():
            signal.signal(s, handler)
        if got:
            signal.raise_signal(got[0])  # handled now, by the handler that was in place


@contextmanager
def atomic_write(path: str | Path, mode: str = "wb"):
    """Yield a temporary file beside `path`'s target; rename it over the target only if the block finishes."""
    check_output_path(path)  # again at write time: an input read since the first check is refused too
    real, st = target(path)
    keep = stat.S_IMODE(st.st_mode) if st is not None else 0o666 & ~_umask()
    tmp = None
    try:
        with _held_signals():  # no signal between mkstemp and `tmp` set: one raised here is inside the try
            try:  # a short prefix: the temporary name must fit in NAME_MAX bytes too
                fd, tmp = tempfile.mkstemp(prefix=f".{real.name[:64]}.", suffix=".tmp", dir=real.parent)
            except OSError as exc:
                raise _refuse(path, exc.strerror or str(exc)) from None
        with os.fdopen(fd, mode) as handle:
            yield handle
        os.chmod(tmp, keep)  # mkstemp makes 0600: give the file its old mode, or the usual one
        os.replace(tmp, real)
    except OSError as exc:
        if tmp is not None:
            _remove(tmp)
        raise _refuse(path, exc.strerror or str(exc)) from None
    except BaseException:
        if tmp is not None:
            _remove(tmp)
        raise


def save_npz(arrays: dict, path: str | Path) -> Path:
    """What np.savez writes (one NAME.npy per array in an uncompressed zip), to `path`, atomically.

    Written here rather than by np.savez, which leaves its zip open when interrupted (a SIGTERM mid-write then
    prints "Exception ignored in ZipFile.__del__" at exit). An interrupted archive is abandoned, never closed: a
    signal that lands while a member closes would otherwise turn into "Can't close the ZIP file while there is an
    open writing handle", an internal error hiding the signal."""
    import zipfile

    import numpy as np

    p = check_output_path(path)
    with atomic_write(p) as handle:
        archive = zipfile.ZipFile(handle, mode="w", allowZip64=True)
        try:
            for name, value in arrays.items():
                with archive.open(f"{name}.npy", mode="w", force_zip64=True) as member:
                    np.lib.format.write_array(member, np.asanyarray(value), allow_pickle=False)
            archive.close()
        except BaseException:  # a signal or an error mid-write: abandon the archive (its temporary file is removed)
            archive.fp = None  # so neither close() nor ZipFile.__del__ writes a directory or raises over the cause
            raise
    return p


def _is_terminal_stream(st: os.stat_result) -> bool:  # the file stdout or stderr writes to (same device and inode)
    for fd in (1, 2):
        try:
            other = os.fstat(fd)
        except OSError:
            continue
        if (other.st_dev, other.st_ino) == (st.st_dev, st.st_ino):
            return True
    return False


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
