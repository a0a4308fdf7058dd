"""The command line: the typer app (app.py), the option sets (options.py, params.py), one short function per
command (commands.py). Nothing imports this package; it imports everything it needs lazily, inside commands."""

from qkv_cli.cli import (
    commands,  # noqa: E402,F401  (registers the commands on `app`)
    generate,  # noqa: E402,F401
)
from qkv_cli.cli.app import app, fail, main

__all__ = ["app", "fail", "main"]
