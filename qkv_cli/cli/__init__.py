"""The command line: the typer app (app.py), the option sets (options.py, params.py), one short function per
command (commands.py). Nothing imports this package; it imports everything it needs lazily, inside commands."""

from qkv_cli.cli import (
    attribute,  # noqa: E402,F401  (qkv attribute: rollout, value norms, value zeroing)
    commands,  # noqa: E402,F401  (registers the commands on `app`)
    compare,  # noqa: E402,F401  (qkv compare: two texts, or two models)
    generate,  # noqa: E402,F401
    learn,  # noqa: E402,F401  (qkv learn: the seven questions)
    patch,  # noqa: E402,F401  (qkv patch: activation patching)
    scan,  # noqa: E402,F401  (qkv scan: heads across a corpus)
    view,  # noqa: E402,F401  (qkv view: the HTML page)
)
from qkv_cli.cli.app import app, fail, main

__all__ = ["app", "fail", "main"]
