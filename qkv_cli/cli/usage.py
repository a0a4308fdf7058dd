"""What a newcomer sees first: `qkv` alone (a short usage with three examples), plain metavars in every --help
(INTEGER, PATH, [a|b]), and a hint when the words of an unquoted TEXT arrive as extra arguments."""

from __future__ import annotations

import re

EXAMPLES = (
    'qkv run "The cat sat on the mat because it was warm." --heads 4 --d 64 --causal',
    'qkv explain "the cat sat" --query 2 --causal',
    "qkv heatmap --causal --heads 4 --d 64 --out attention.png",
)
PLAIN = {int: "INTEGER", float: "FLOAT", str: "TEXT", bool: "BOOLEAN"}


def short_usage(group, ctx) -> str:
    """`qkv` with nothing after it: how to start, not the whole --help."""
    commands = ", ".join(name for name in group.list_commands(ctx) if not group.get_command(ctx, name).hidden)
    lines = [
        "Usage: qkv COMMAND [ARGS]...",
        "",
        f"  {group.help}",
        "",
        "Try:",
        *(f"  {example}" for example in EXAMPLES),
        "",
        f"Commands: {commands}",
        "qkv COMMAND --help lists a command's options; qkv --help shows every command.",
    ]
    return "\n".join(lines)


def default_metavar(param) -> str | None:
    """Click's plain words for an option declared without a metavar: INTEGER, FLOAT, TEXT, or [a|b] for a choice.

    Reads typer's description of the parameter; with a typer that has none, typer's own metavar stays."""
    described = getattr(param, "type_descriptor", None)
    if described is None:
        return None
    try:
        choices = described.choices
        if choices:
            return "[" + "|".join(str(getattr(c, "value", c)) for c in choices) + "]"
        annotation = described.annotation
        if described.is_list:
            annotation = annotation.__args__[0]
    except (AttributeError, IndexError, TypeError):
        return None
    return PLAIN.get(annotation)


def plain_metavars(command) -> None:
    """Give every parameter of `command` and its subcommands a plain metavar (once; a declared one is kept)."""
    for param in getattr(command, "params", ()):
        if getattr(param, "is_flag", False) or getattr(param, "count", False):
            continue
        if param.metavar is None:
            param.metavar = default_metavar(param)
        if param.param_type_name == "argument" and param.metavar is not None:
            param.display_type_rich = lambda ctx: None  # typer would add "<str>" after the argument's TEXT
    for sub in getattr(command, "commands", {}).values():
        plain_metavars(sub)


EXTRA = re.compile(r"^Got unexpected extra arguments? ?(?:\(s\))? \((?P<words>.*)\)$", re.S)


def quoted(text: str) -> str:
    if not re.search(r'["$`\\!]', text):
        return f'"{text}"'
    import shlex

    return shlex.quote(text)


def extra_arguments_hint(exc) -> str | None:
    """`qkv run The cat sat`: the shell split the sentence; say how to give it as one TEXT."""
    ctx = exc.ctx
    match = EXTRA.match(exc.format_message())
    if ctx is None or match is None or not any(p.name == "text" for p in ctx.command.params):
        return None
    first = ctx.params.get("text")
    words = " ".join(w for w in (first, match["words"]) if w)
    return f"TEXT is one argument: put it in quotes, {ctx.command_path} {quoted(words)}"


def out_of_memory(argv) -> str:
    """The line for a MemoryError: what would still help, never an option already given (--dtype float32 when
    float32 is in use; --window, heads and width when a checkpoint fixes them)."""
    argv = [str(a) for a in argv]

    def value(flag: str) -> str | None:
        for i, arg in enumerate(argv):
            if arg == flag and i + 1 < len(argv):
                return argv[i + 1]
            if arg.startswith(flag + "="):
                return arg.split("=", 1)[1]
        return None

    hints = [] if value("--dtype") == "float32" else ["--dtype float32"]
    if value("--model") is not None:
        hints += [*([] if value("--rows") else ["--rows A:B (fewer query rows)"]), "one --layer", "a shorter text"]
    else:
        hints += [*([] if value("--window") else ["--window N"]), "fewer heads", "a shorter text"]
    return "out of memory: try " + ", ".join(hints[:-1]) + " or " + hints[-1]
