"""The typer app: one error policy (one line on stderr, exit 2), the version, and the entry point."""

import os
import sys
from typing import Annotated

import typer
from typer.core import TyperGroup

try:  # typer >= 0.2x raises the exceptions of its own vendored click (and click may not be installed at all)
    from typer._click import exceptions as click_exceptions
except ImportError:  # pragma: no cover - older typer is built on click
    from click import exceptions as click_exceptions

from qkv_cli import __version__
from qkv_cli.cli.usage import extra_arguments_hint, out_of_memory, plain_metavars, short_usage
from qkv_cli.errors import QkvError, owned_float_errors


class QkvGroup(TyperGroup):
    """Every error reaches the user as one line on stderr with exit code 2; never a traceback."""

    def invoke(self, ctx):  # the command runs with the floating-point error state owned in one place
        with owned_float_errors():
            return super().invoke(ctx)

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        code = 0
        plain_metavars(self)
        from qkv_cli.cli.shell import note_named_shell, use_for_typer

        note_named_shell(sys.argv[1:] if args is None else args)
        use_for_typer()
        try:
            rv = super().main(args=args, prog_name="qkv", complete_var=complete_var, standalone_mode=False, **extra)
            code = rv if isinstance(rv, int) else 0
        except NO_ARGS_IS_HELP as exc:  # `qkv` alone: a short usage with examples, on stdout (--help has it all)
            typer.echo(short_usage(self, exc.ctx))
        except click_exceptions.UsageError as exc:
            # a subcommand's error names it (`qkv run: ...`); the root's would repeat the `qkv: error:` prefix
            where = f"{exc.ctx.command_path}: " if exc.ctx is not None and exc.ctx.parent is not None else ""
            code = fail(f"{where}{usage_message(exc)}")
        except click_exceptions.ClickException as exc:
            code = fail(exc.format_message())
        except QkvError as exc:
            code = fail(str(exc))
        except typer.Abort:
            code = fail("aborted", 130)
        except MemoryError:
            code = fail(out_of_memory(sys.argv[1:] if args is None else args))
        except BrokenPipeError:  # the reader went away (`qkv run ... | head`): stop quietly
            quiet_stdout()
            code = 0
        except OSError as exc:  # stdout on a full disk (> /dev/full), or closed: the output did not get out
            code = fail(f"cannot write the output: {exc.strerror or exc}")
        except Exception as exc:  # a bug: still one line, but exit 1 so tests and users can tell
            if os.environ.get("QKV_DEBUG"):
                raise
            code = fail(f"internal error: {type(exc).__name__}: {exc} (QKV_DEBUG=1 shows the traceback)", 1)
        if code == 0:
            code = flushed()
        if standalone_mode:
            sys.exit(code)
        return code


def flushed() -> int:
    """Flush stdout: a write that fails at the end (a full disk) is an error too, never a silent exit 0."""
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        quiet_stdout()
    except (OSError, ValueError) as exc:
        return fail(f"cannot write the output: {getattr(exc, 'strerror', None) or exc}")
    return 0


NO_ARGS_IS_HELP = getattr(click_exceptions, "NoArgsIsHelpError", ())


PYDANTIC = {  # typer's validator's error types, in plain words
    "int_parsing": "is not an integer",
    "int_from_float": "is not an integer",
    "float_parsing": "is not a number",
}


def usage_message(exc) -> str:
    """Click's message in plain words: the rejected value and what would do, where typer's validator (pydantic)
    says "Input should be a valid integer, unable to parse string as an integer"."""
    message = exc.format_message()
    errors = getattr(exc.__cause__, "errors", None)  # typer validates with pydantic: the error holds the input
    if isinstance(exc, click_exceptions.BadParameter) and callable(errors):
        try:
            error = errors()[0]
            value, kind, said = error["input"], error.get("type"), str(error.get("msg", ""))
        except (LookupError, TypeError, ValueError):
            return message
        if not isinstance(value, str | int | float):
            return message
        plain = PYDANTIC.get(kind)
        if plain is None and said.startswith("Input should be "):
            plain = f"is not valid: it should be {said.removeprefix('Input should be ')}"
        if plain is not None:
            exc.message = f"{str(value)!r} {plain}"
            return exc.format_message()
        if said.startswith("Value error, "):  # a choice: "'xml' is not one of 'table', 'json', 'csv'."
            exc.message = said.removeprefix("Value error, ")
            return exc.format_message()
        if repr(str(value)) not in message:
            return f"{message} (got {str(value)!r})"
    elif not isinstance(exc, click_exceptions.BadParameter) and exc.ctx is not None:  # unknown option or command
        hint = extra_arguments_hint(exc) or f"try '{exc.ctx.command_path} --help'"
        return f"{message} ({hint})"
    return message


def quiet_stdout() -> None:
    """Point stdout at /dev/null so that the interpreter's final flush does not fail on a closed pipe."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # no real file descriptor (e.g. under CliRunner)
        pass


def fail(message: str, code: int = 2) -> int:
    line = " ".join(str(message).split())
    if not line.isprintable():  # a NUL or an escape sequence from user input must not reach the terminal raw
        line = "".join(c if c.isprintable() else repr(c)[1:-1] for c in line)
    sys.stderr.write(f"qkv: error: {line}\n")
    sys.stderr.flush()
    return code


app = typer.Typer(
    cls=QkvGroup,
    add_completion=True,  # --install-completion, --show-completion; the shell asks through _QKV_COMPLETE
    no_args_is_help=True,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
    help="Inspect Q, K, V and masked multi-head attention: Att(Q, K, V) = Softmax(Q K^T / sqrt(d_k) + Mask) V.",
)


def version_callback(value: bool):
    if value:
        typer.echo(f"qkv {__version__}")
        raise typer.Exit()


@app.callback()
def root(
    version: Annotated[
        bool, typer.Option("--version", callback=version_callback, is_eager=True, help="Print the version.")
    ] = False,
):
    """Inspect Q, K, V and masked multi-head attention from the terminal."""


def main():
    app(prog_name="qkv")
