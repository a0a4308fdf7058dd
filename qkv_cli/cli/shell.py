"""Which shell `--show-completion` and `--install-completion` write for: the one named on the command line, else
the shell among qkv's parent processes (shellingham, as typer asks), else the login shell in $SHELL (a process
manager, an IDE's test runner or a cron job runs qkv with no shell as a parent)."""

from __future__ import annotations

import os
from pathlib import PurePath

from qkv_cli.errors import QkvError

SHELLS = ("bash", "zsh", "fish", "powershell", "pwsh")
OPTIONS = ("--show-completion", "--install-completion")
_named: list[str] = []  # the shell named after one of OPTIONS in this invocation's arguments


def note_named_shell(args) -> None:
    """Remember `bash` in `qkv --show-completion bash` (typer's flag takes no value, so it would be lost)."""
    _named.clear()
    args = [str(a) for a in args or ()]
    for i, arg in enumerate(args[:-1]):
        if arg in OPTIONS and args[i + 1].lower() in SHELLS:
            _named.append(args[i + 1].lower())


def shell_name() -> str:
    """bash, zsh, fish, powershell or pwsh; QkvError naming what to do when none can be found."""
    if _named:
        return _named[0]
    try:
        import shellingham

        found = shellingham.detect_shell()[0].lower()
    except Exception:  # ShellDetectionFailure, or a /proc it cannot read: fall back to $SHELL
        found = ""
    if found in SHELLS:
        return found
    login = PurePath(os.environ.get("SHELL", "")).name.lower().removesuffix(".exe")
    if login in SHELLS:
        return login
    raise QkvError(
        "could not tell which shell to write completion for (no bash, zsh, fish or PowerShell among the parent "
        "processes or in $SHELL): name it, e.g. qkv --show-completion bash"
    )


def use_for_typer() -> None:
    """typer asks `_get_shell_name` when a completion flag is given without a shell: ask ours instead."""
    import typer._completion_shared as shared
    import typer.completion as completion

    shared._get_shell_name = completion._get_shell_name = shell_name
