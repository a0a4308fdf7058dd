"""The qkv command line: parse, call the pipeline, render. Heavy modules are imported inside commands."""

import functools
import inspect
import os
import sys
from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated

import typer
from typer.core import TyperGroup

try:  # typer >= 0.2x raises the exceptions of its own vendored click (and click may not be installed at all)
    from typer._click import exceptions as click_exceptions
except ImportError:  # pragma: no cover - older typer is built on click
    from click import exceptions as click_exceptions

from qkv_cli import __version__
from qkv_cli.errors import QkvError


class QkvGroup(TyperGroup):
    """Every error reaches the user as one line on stderr with exit code 2; never a traceback."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        code = 0
        try:
            rv = super().main(
                args=args, prog_name=prog_name or "qkv", complete_var=complete_var, standalone_mode=False, **extra
            )
            code = rv if isinstance(rv, int) else 0
        except NO_ARGS_IS_HELP as exc:  # `qkv` alone: the help, on stdout, as for --help
            typer.echo(exc.format_message())
        except click_exceptions.UsageError as exc:
            where = f"{exc.ctx.command_path}: " if exc.ctx is not None else ""
            code = fail(f"{where}{usage_message(exc)}")
        except click_exceptions.ClickException as exc:
            code = fail(exc.format_message())
        except QkvError as exc:
            code = fail(str(exc))
        except typer.Abort:
            code = fail("aborted", 130)
        except MemoryError:
            code = fail("out of memory: try --dtype float32, --window N, fewer heads or a shorter text")
        except BrokenPipeError:
            sys.stderr = open(os.devnull, "w")  # noqa: SIM115 - the reader went away; say nothing more
            code = 0
        except Exception as exc:  # a bug: still one line, but exit 1 so tests and users can tell
            if os.environ.get("QKV_DEBUG"):
                raise
            code = fail(f"internal error: {type(exc).__name__}: {exc} (QKV_DEBUG=1 shows the traceback)", 1)
        if standalone_mode:
            sys.exit(code)
        return code


NO_ARGS_IS_HELP = getattr(click_exceptions, "NoArgsIsHelpError", ())


def usage_message(exc) -> str:
    """Click's message, plus the rejected value when typer's validator only says what it wanted."""
    message = exc.format_message()
    errors = getattr(exc.__cause__, "errors", None)  # typer validates with pydantic: the error holds the input
    if isinstance(exc, click_exceptions.BadParameter) and callable(errors):
        try:
            value = errors()[0]["input"]
        except (LookupError, TypeError, ValueError):
            return message
        if isinstance(value, str | int | float) and repr(str(value)) not in message:
            return f"{message} (got {str(value)!r})"
    return message


def fail(message: str, code: int = 2) -> int:
    line = " ".join(str(message).split())
    sys.stderr.write(f"qkv: error: {line}\n")
    sys.stderr.flush()
    return code


app = typer.Typer(
    cls=QkvGroup,
    add_completion=False,
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


# ---- choices ---------------------------------------------------------------------------------------------


class Dtype(StrEnum):
    float64 = "float64"
    float32 = "float32"


class Positions(StrEnum):
    sinusoidal = "sinusoidal"
    none = "none"


class Projection(StrEnum):
    random = "random"
    identity = "identity"


class Format(StrEnum):
    table = "table"
    json = "json"
    csv = "csv"


SHOW_CHOICES = ("q", "k", "v", "scores", "mask", "weights", "output", "heads", "h")

# ---- options, declared once ------------------------------------------------------------------------------

TextArg = Annotated[str | None, typer.Argument(help="Text to inspect ('-' reads stdin).", show_default=False)]
FileOpt = Annotated[str | None, typer.Option("--file", "-f", help="Read the text from a UTF-8 file ('-' = stdin).")]
DOpt = Annotated[int, typer.Option("--d", min=1, help="Model width d (columns of H).")]
TauOpt = Annotated[int, typer.Option("--heads", "--tau", min=1, help="Number of heads tau; d_k = d / tau.")]
SeedOpt = Annotated[int, typer.Option(min=0, help="Seed for token vectors and projections.")]
KernelOpt = Annotated[str, typer.Option(help="Attention kernel: vectorized or loop (same numbers).")]
CausalOpt = Annotated[bool, typer.Option("--causal", help="Causal mask V_<=i: query i sees keys 0..i.")]
WindowOpt = Annotated[
    int | None, typer.Option(min=1, help="Sliding window n_c: query i sees keys i-n_c+1..i (implies causal).")
]
ScaleOpt = Annotated[
    str, typer.Option(help="auto = 1/sqrt(d_k), none = 1, sqrt = sqrt(d_k) (the misprint), or a number.")
]
PositionsOpt = Annotated[Positions, typer.Option(help="Add sinusoidal positional encodings to H, or none.")]
ProjectionOpt = Annotated[
    Projection, typer.Option(help="random (seeded Glorot) W_j^q/k/v, or identity: Q = K = V = slices of H.")
]
DtypeOpt = Annotated[Dtype, typer.Option(help="Floating point type.")]
TokenizerOpt = Annotated[str, typer.Option(help="word, bpe, or a path to a Hugging Face tokenizer.json.")]
MaxMemoryOpt = Annotated[
    str | None, typer.Option("--max-memory", help="Refuse runs estimated above this, e.g. 2GB (default: half the RAM).")
]
HeadOpt = Annotated[list[int] | None, typer.Option("--head", help="Head to show, 0..tau-1 (repeatable; default all).")]
ShowOpt = Annotated[str, typer.Option(help=f"Comma list of matrices to show: {','.join(SHOW_CHOICES)}.")]
PrecisionOpt = Annotated[int, typer.Option(min=0, max=12, help="Digits after the decimal point.")]
FormatOpt = Annotated[Format, typer.Option("--format", help="table, json or csv (on stdout).")]
SaveNpzOpt = Annotated[str | None, typer.Option("--save-npz", help="Also save every matrix to this .npz file.")]
OutOpt = Annotated[str, typer.Option("--out", "-o", help="Image file: .png, .svg or .pdf.")]


@dataclass
class ModelOptions:
    """The options every model command shares, gathered into one object."""

    file: str | None
    d: int
    tau: int
    seed: int
    kernel: str
    causal: bool
    window: int | None
    scale: str
    positions: Positions
    projection: Projection
    dtype: Dtype
    tokenizer: str
    max_memory: str | None

    def settings(self):
        from qkv_cli.config import Settings

        return Settings(
            d=self.d,
            tau=self.tau,
            seed=self.seed,
            kernel=self.kernel,
            causal=self.causal,
            window=self.window,
            scale=self.scale,
            positions=self.positions.value,
            projection=self.projection.value,
            dtype=self.dtype.value,
            tokenizer=self.tokenizer,
        )

    def memory_limit(self) -> int | None:
        from qkv_cli.budget import parse_size

        return None if self.max_memory is None else parse_size(self.max_memory)

    def compute(self, text: str | None, default: str | None = None):
        """Validate everything cheap first, then read the text and run the pipeline."""
        from qkv_cli.inputs import get_text
        from qkv_cli.pipeline import run

        settings, limit = self.settings(), self.memory_limit()
        return run(get_text(text, self.file, default), settings, max_memory=limit)


MODEL_OPTIONS = [
    ("file", FileOpt, None),
    ("d", DOpt, 512),
    ("tau", TauOpt, 8),
    ("seed", SeedOpt, 0),
    ("kernel", KernelOpt, "vectorized"),
    ("causal", CausalOpt, False),
    ("window", WindowOpt, None),
    ("scale", ScaleOpt, "auto"),
    ("positions", PositionsOpt, Positions.sinusoidal),
    ("projection", ProjectionOpt, Projection.random),
    ("dtype", DtypeOpt, Dtype.float64),
    ("tokenizer", TokenizerOpt, "word"),
    ("max_memory", MaxMemoryOpt, None),
]


def model_options(func):
    """Give a command the shared model options; it receives them as one `opts: ModelOptions`."""
    sig = inspect.signature(func)
    own = [p for p in sig.parameters.values() if p.name != "opts"]
    shared = [
        inspect.Parameter(n, inspect.Parameter.KEYWORD_ONLY, default=v, annotation=a) for n, a, v in MODEL_OPTIONS
    ]

    @functools.wraps(func)
    def wrapper(**kwargs):
        opts = ModelOptions(**{name: kwargs.pop(name) for name, _, _ in MODEL_OPTIONS})
        return func(opts=opts, **kwargs)

    wrapper.__signature__ = sig.replace(parameters=own + shared)
    wrapper.__annotations__ = {p.name: p.annotation for p in own + shared}
    return wrapper


def parse_show(show: str) -> list[str]:
    names = [s.strip().lower() for s in show.split(",") if s.strip()]
    bad = [s for s in names if s not in SHOW_CHOICES]
    if bad or not names:
        raise QkvError(f"--show {show!r} is not valid: use a comma list of {', '.join(SHOW_CHOICES)}")
    return list(dict.fromkeys(names))


def parse_heads(head: list[int] | None, tau: int) -> list[int]:
    if not head:
        return list(range(tau))
    bad = [j for j in head if not 0 <= j < tau]
    if bad:
        raise QkvError(f"--head {bad[0]} does not exist: heads are numbered 0..{tau - 1}")
    return list(dict.fromkeys(head))


# ---- commands --------------------------------------------------------------------------------------------


@app.command(epilog="Example: qkv run 'The animal did not cross the street because it was tired.' --heads 8 --causal")
@model_options
def run(
    text: TextArg = None,
    *,
    opts: ModelOptions,
    head: HeadOpt = None,
    show: ShowOpt = "weights",
    precision: PrecisionOpt = 2,
    format: FormatOpt = Format.table,
    save_npz: SaveNpzOpt = None,
):
    """Run masked multi-head attention on TEXT and print each head's weights (or other matrices)."""
    from qkv_cli import views

    names, heads = parse_show(show), parse_heads(head, opts.tau)
    views.check_npz_path(save_npz)
    result = opts.compute(text)
    views.emit(result, names, heads, precision, format.value, save_npz)


@app.command(epilog="Example: qkv heatmap --causal --heads 4 --out causal.png")
@model_options
def heatmap(
    text: TextArg = None,
    *,
    opts: ModelOptions,
    head: HeadOpt = None,
    out: OutOpt = "attention.png",
):
    """Save a grid of per-head attention heatmaps (PNG, SVG or PDF). With no TEXT, uses a built-in sample."""
    from qkv_cli import views

    heads = parse_heads(head, opts.tau)
    views.check_image_path(out)
    result = opts.compute(text, default=views.default_text())
    typer.echo(views.save_heatmap(result, heads, out))


@app.command(epilog="Example: qkv shapes --d 512 --tau 8 --m 30")
def shapes(
    text: TextArg = None,
    d: DOpt = 512,
    tau: TauOpt = 8,
    m: Annotated[int | None, typer.Option("--m", min=1, help="Number of tokens m (default 30, or TEXT's).")] = None,
    n: Annotated[int | None, typer.Option("--n", min=1, help="Key/value positions n (default m).")] = None,
    dtype: DtypeOpt = Dtype.float64,
    tokenizer: TokenizerOpt = "word",
    format: Annotated[Format, typer.Option("--format", help="table or json.")] = Format.table,
):
    """Print the shape, parameters, FLOPs and bytes of every matrix in masked multi-head attention."""
    from qkv_cli import shapes_view

    shapes_view.emit(text, d, tau, m, n, dtype.value, tokenizer, format.value)


def main():
    app(prog_name="qkv")


if __name__ == "__main__":
    main()
