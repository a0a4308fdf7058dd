"""`qkv learn`: the seven textbook questions, each answered by a live qkv command and two sentences on it."""

from typing import Annotated

import typer

from qkv_cli.cli.app import app

NumberArg = Annotated[int | None, typer.Argument(metavar="N", help="The question to run, 1..7 (default: all of them).")]
ListOpt = Annotated[bool, typer.Option("--list", help="List the questions and stop.")]
LearnModelOpt = Annotated[str | None, typer.Option("--model", metavar="NAME|PATH", help="An encoder-decoder "
                          "checkpoint (T5, BART, Marian) for question 7's live patching: its cross-attention's Q, K "
                          "and V patched head by head between two sources.")]  # fmt: skip


@app.command(epilog="Example: qkv learn 4")
def learn(ctx: typer.Context, number: NumberArg = None, list_: ListOpt = False, model: LearnModelOpt = None):
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
        if item.patching is not None:
            typer.echo("")
            live_patching(item, model, shutil.get_terminal_size().columns)


def live_patching(item, model: str | None, width: int) -> None:
    """A lesson's qkv patch on the encoder-decoder the user names, through the API, and what its numbers show."""
    from qkv_cli.api.patches import patching
    from qkv_cli.views.console.lessons import no_model, patch_line, verdict
    from qkv_cli.views.console.patch import emit

    if model is None:
        typer.echo(no_model(item, width))
        return
    typer.echo(f"$ {patch_line(item, model)}")
    result = patching(item.patching["clean"], item.patching["corrupted"], model, dict(item.patching))
    emit(result, "table", 6, 3)
    typer.echo("")
    typer.echo(verdict(result, width))
