"""The command reference, generated from the CLI itself (the docs site's pages and their test use it): each
command's usage, help, example and every option with its help and default, as Markdown."""

from __future__ import annotations

import re

PLACEHOLDER = re.compile(r"<!-- qkv-reference: ([a-z-]+) -->")


def group():
    """The click group behind the typer app, with the metavars as `--help` shows them."""
    import typer

    from qkv_cli.cli import app
    from qkv_cli.cli.usage import plain_metavars

    root = typer.main.get_command(app)
    plain_metavars(root)
    return root


def command_names() -> list[str]:
    root = group()
    return [name for name, cmd in root.commands.items() if not cmd.hidden]


def cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def command_markdown(name: str, heading: str = "##") -> str:
    """One command: usage, the help text, the example, and a table of every argument and option."""
    root = group()
    if name not in root.commands:
        raise KeyError(f"no command {name!r}: {', '.join(root.commands)}")
    cmd = root.commands[name]
    ctx = cmd.context_class(cmd, info_name=name, parent=root.context_class(root, info_name="qkv"))
    lines = [f"{heading} `qkv {name}`", "", "```text", cmd.get_usage(ctx).strip(), "```"]
    for part in (cmd.help or "").split("\n\n"):
        lines += ["", " ".join(part.split())]
    if cmd.epilog:
        lines += ["", f"Example: `{cmd.epilog.removeprefix('Example: ')}`"]
    lines += ["", "| argument or option | meaning |", "|---|---|"]
    for param in cmd.get_params(ctx):
        record = param.get_help_record(ctx)
        if record is None or getattr(param, "hidden", False):
            continue
        names, helptext = record
        lines.append(f"| `{cell(names)}` | {cell(helptext)} |")
    return "\n".join(lines) + "\n"


def expand(markdown: str) -> str:
    """Replace each `<!-- qkv-reference: NAME -->` with that command's reference (`all`: every command)."""

    def one(match: re.Match) -> str:
        name = match.group(1)
        if name == "all":
            return "\n".join(command_markdown(n) for n in command_names())
        return command_markdown(name, heading="##")

    return PLACEHOLDER.sub(one, markdown)
