"""Rust's own output kept off the user's stderr: a panic inside `tokenizers` (a hostile pre-tokenizer regex hits
Oniguruma's retry limit, a malformed GGUF vocabulary trips an index) prints `thread '<unnamed>' panicked at ...`,
and with RUST_BACKTRACE=1 a backtrace of some 190 lines, straight to file descriptor 2 before Python sees the
PanicException. qkv's own one-line error already carries the panic's message, so that output is dropped.

`held_stderr()` points descriptor 2 at an unnamed temporary file for the duration of a call into Rust. When the call
raises a PanicException, what was written there is discarded; otherwise (success, an ordinary error, Ctrl-C) it is
replayed to the real stderr, so nothing else written meanwhile is lost."""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile

REPLAY_BYTES = 1 << 16  # at most this much of what was held is written back


def is_panic(exc: BaseException) -> bool:  # pyo3's PanicException: a BaseException, not an Exception
    return type(exc).__name__ == "PanicException"


@contextlib.contextmanager
def held_stderr():
    try:
        saved = os.dup(2)
    except OSError:  # descriptor 2 is closed: nothing can reach the user anyway
        yield
        return
    panicked = False
    with tempfile.TemporaryFile() as held:
        _flush()
        os.dup2(held.fileno(), 2)
        try:
            yield
        except BaseException as exc:
            panicked = is_panic(exc)
            raise
        finally:
            _flush()
            os.dup2(saved, 2)
            os.close(saved)
            if not panicked:
                _replay(held)


def _flush() -> None:
    with contextlib.suppress(Exception):
        if sys.stderr is not None:
            sys.stderr.flush()


def _replay(held) -> None:
    with contextlib.suppress(OSError):
        held.seek(0)
        data = held.read(REPLAY_BYTES)
        if data:
            os.write(2, data)
