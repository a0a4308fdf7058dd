"""The `qkv` entry point: signals first (so that an early Ctrl-C or a SIGTERM never prints a traceback or leaves a
temporary file), then the command line.

The handlers are installed when this module is imported, before typer, NumPy or anything else is: the console
script imports it first. Only the interpreter's own start-up, before this line runs, is outside them."""

import os
import signal
import sys


def _stop(signum, frame):  # SIGTERM, SIGHUP: unwind like an exception, so temporary files are removed
    raise SystemExit(128 + signum)


def _interrupt(signum, frame):  # SIGINT (Ctrl-C): one line, exit 130, unwinding (temporary files removed)
    sys.stderr.write("qkv: error: interrupted\n")
    raise SystemExit(130)


def _install() -> None:
    signal.signal(signal.SIGINT, _interrupt)
    for sig in (signal.SIGTERM, getattr(signal, "SIGHUP", None)):
        if sig is not None:
            signal.signal(sig, _stop)


_install()


def main():
    _install()  # again, in case something replaced them (python -m qkv_cli imports this module the same way)
    try:
        if sys.stdout is None or sys.stderr is None:  # started with a closed stdout: nothing could be shown
            if sys.stderr is not None:
                sys.stderr.write("qkv: error: stdout is closed: nothing can be written\n")
            sys.exit(2)
        from qkv_cli.cli.terminal import prepare

        prepare()
        from qkv_cli.cli.app import main as run

        run()
    except KeyboardInterrupt:  # raised by code that ran its own SIGINT handling
        sys.stderr.write("qkv: error: interrupted\n")
        _leave(130)
    except SystemExit as done:  # the command finished (its files are written and closed): leave at once
        _leave(done.code)


def _leave(code) -> None:
    """Exit without the interpreter's clean-up, which frees every module's objects one by one: 0.25-0.3 s after a
    heatmap here (matplotlib, NumPy, typer and pydantic loaded), for nothing qkv needs (qkv registers no atexit
    handler; its files are written and closed before this). What Python would still do is done first: stdout and
    stderr flushed (a failed flush of a successful run's stdout exits 120, as Python does), a non-integer exit code
    printed (exit 1)."""
    if code is None:
        code = 0
    elif not isinstance(code, int):
        if sys.stderr is not None:
            sys.stderr.write(f"{code}\n")
        code = 1
    for stream in (sys.stdout, sys.stderr):
        if stream is None:  # started with the descriptor closed
            continue
        try:
            stream.flush()
        except (OSError, ValueError):  # a reader that went away, or a closed stream: nothing more can get out
            if stream is sys.stdout and code == 0:
                code = 120
    os._exit(code)


if __name__ == "__main__":
    main()
