"""`qkv learn`: the seven textbook questions, each answered by a live qkv command and two sentences on it."""

from typing import Annotated

import typer

from qkv_cli.cli.app import app

NumberArg = Annotated[int | None, typer.Argument(metavar="N", help="The question to run, 1..7 (default: all of them).")]
ListOpt = Annotated[bool, typer.Option("--list", help="List the questions and stop.")]


@app.command(epilog="Example: qkv learn 4")
def learn(ctx: typer.Context, number: NumberArg = None, list_: ListOpt = False):
    """Walk the classic questions about Q, K and V: for each, the command that answers it, its real output (run
    now, by the same code as the command itself) and what to read in it."""
    import shutil

    from qkv_cli.views.console.lessons import LESSONS, command_line, heading, lesson, listing, reading

    if list_:
        typer.echo(listing())
        return
    chosen = LESSONS if number is None else (lesson(number),)
    group = ctx.find_root().command
    for k, item in enumerate(chosen):
        if k:
            typer.echo("")
        typer.echo(heading(item))
        for args in item.commands:
            typer.echo("")
            typer.echo(f"$ {command_line(args)}")
            code = group.main(args=list(args), standalone_mode=False)
            if code:
                raise typer.Exit(code)
        typer.echo("")
        typer.echo(reading(item, shutil.get_terminal_size().columns))
