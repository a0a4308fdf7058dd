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
            rv = super().main(args=args, prog_name="qkv", complete_var=complete_var, standalone_mode=False, **extra)
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
        except BrokenPipeError:  # the reader went away (`qkv run ... | head`): stop quietly
            quiet_stdout()
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
    elif not isinstance(exc, click_exceptions.BadParameter) and exc.ctx is not None:  # unknown option or command
        return f"{message} (try '{exc.ctx.command_path} --help')"
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


class TableJson(StrEnum):
    table = "table"
    json = "json"


class Ablate(StrEnum):
    q = "q"
    k = "k"
    v = "v"


class AblateWith(StrEnum):
    zeros = "zeros"
    noise = "noise"


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
TableJsonOpt = Annotated[TableJson, typer.Option("--format", help="table or json (on stdout).")]
ContextOpt = Annotated[
    str | None, typer.Option("--context", help="Cross-attention: keys and values from this text Y, queries from TEXT.")
]
ContextFileOpt = Annotated[
    str | None, typer.Option("--context-file", help="Read the --context text from a UTF-8 file ('-' = stdin).")
]
KvHeadsOpt = Annotated[
    int | None,
    typer.Option("--kv-heads", min=1, help="Grouped-query attention: G key/value heads shared by the tau query heads."),
]
MaskFileOpt = Annotated[
    str | None, typer.Option("--mask-file", help="Custom m x n mask: .npy boolean or a 0/1 text grid; 1 = may attend.")
]
AblateOpt = Annotated[
    Ablate | None, typer.Option("--ablate", help="Replace Q, K or V (a projection's output) to see what changes.")
]
AblateWithOpt = Annotated[
    AblateWith, typer.Option("--ablate-with", help="zeros, or seeded noise with the matrix's own std.")
]


ModelOpt = Annotated[
    str | None,
    typer.Option(
        "--model",
        help="A real checkpoint: a folder with config.json, model.safetensors and tokenizer.json, a NAME in the "
        "Hugging Face cache (e.g. sentence-transformers/all-MiniLM-L6-v2), or an installed package that ships one.",
    ),
]
LayerOpt = Annotated[
    list[int] | None,
    typer.Option(
        "--layer", help="With --model: layer 0..L-1 or -1 (repeatable; default last for tables, all for JSON)."
    ),
]
DownloadOpt = Annotated[
    bool,
    typer.Option("--download", help="With --model NAME not in the cache: fetch it (pip install 'qkv-cli[download]')."),
]


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
    context: str | None = None
    context_file: str | None = None
    kv_heads: int | None = None
    mask_file: str | None = None
    ablate: Ablate | None = None
    ablate_with: AblateWith = AblateWith.zeros
    model: str | None = None
    layer: list[int] | None = None
    download: bool = False
    explicit: frozenset = frozenset()  # the options given on the command line (not defaults)

    def checkpoint(self):
        """The loaded --model, or None; options that the checkpoint fixes are an error with it."""
        if self.model is None:
            for name, what in (("layer", "chooses a layer of"), ("download", "fetches")):
                if name in self.explicit:
                    raise QkvError(f"--{name} needs --model: it {what} a real checkpoint (see qkv models)")
            return None
        from qkv_cli import checkpoint

        checkpoint.check_options(self.explicit)
        return checkpoint.load(self.model, self.dtype.value, self.download)

    def compute_model(self, model, text: str | None, default: str | None = None, all_layers: bool = False):
        """A checkpoint.ModelRun: the forward pass, with the chosen layers as pipeline Results."""
        from qkv_cli import checkpoint
        from qkv_cli.inputs import get_text

        text = get_text(text, self.file, default)
        return checkpoint.run(model, text, self.layer, all_layers, self.kernel, self.memory_limit())

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
            kv_heads=self.kv_heads,
            ablate=None if self.ablate is None else self.ablate.value,
            ablate_with=self.ablate_with.value,
        )

    def memory_limit(self) -> int | None:
        from qkv_cli.budget import parse_size

        return None if self.max_memory is None else parse_size(self.max_memory)

    def compute(self, text: str | None, default: str | None = None, band_ok: bool = False):
        """Validate everything cheap first, then read the text and run the pipeline.

        band_ok: a long text under --window may keep only the band of the weights (a longdoc.BandResult)."""
        from qkv_cli.inputs import get_text
        from qkv_cli.pipeline import run

        settings, limit = self.settings(), self.memory_limit()
        extras = self.learning_inputs(settings, text)
        if band_ok and settings.window is not None and not extras and settings.ablate is None:
            from qkv_cli import longdoc

            return longdoc.run(get_text(text, self.file, default), settings, max_memory=limit)
        return run(get_text(text, self.file, default), settings, max_memory=limit, **extras)

    def learning_inputs(self, settings, text: str | None = None) -> dict:
        """--context / --context-file and --mask-file, checked and read before the text."""
        from qkv_cli.learn import read_inputs

        return read_inputs(settings, self.context, self.context_file, self.mask_file, text == "-" or self.file == "-")

    def compute_each(self, text: str | None, default: str | None = None) -> list:
        """One Result per line of --file (one sentence per line), or one Result for TEXT."""
        from qkv_cli.learn import run_lines

        if self.file is None or text is not None:
            return [self.compute(text, default)]
        settings = self.settings()
        return run_lines(self.file, settings, self.memory_limit(), self.learning_inputs(settings))

    def compute_batch(self, text: str | None):
        """--batch: one sentence per line of TEXT or --file, padded to the longest."""
        from qkv_cli.learn import run_batch_text

        settings = self.settings()
        return run_batch_text(text, self.file, settings, self.memory_limit(), self.learning_inputs(settings, text))


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
    ("context", ContextOpt, None),
    ("context_file", ContextFileOpt, None),
    ("kv_heads", KvHeadsOpt, None),
    ("mask_file", MaskFileOpt, None),
    ("ablate", AblateOpt, None),
    ("ablate_with", AblateWithOpt, AblateWith.zeros),
    ("model", ModelOpt, None),
    ("layer", LayerOpt, None),
    ("download", DownloadOpt, False),
]


def model_options(func=None, **defaults):
    """Give a command the shared model options; it receives them as one `opts: ModelOptions`.

    `@model_options(d=8, tau=2)` changes the defaults for one command (qkv explain)."""
    if func is None:
        return functools.partial(model_options, **defaults)
    sig = inspect.signature(func)
    own = [p for p in sig.parameters.values() if p.name != "opts"]
    shared = [
        inspect.Parameter(n, inspect.Parameter.KEYWORD_ONLY, default=defaults.get(n, v), annotation=a)
        for n, a, v in MODEL_OPTIONS
    ] + [inspect.Parameter("qkv_context", inspect.Parameter.KEYWORD_ONLY, annotation=typer.Context)]

    @functools.wraps(func)
    def wrapper(**kwargs):
        ctx = kwargs.pop("qkv_context")
        given = set()
        for name, _, _ in MODEL_OPTIONS:
            source = ctx.get_parameter_source(name)
            if source is not None and source.name not in ("DEFAULT", "DEFAULT_MAP"):
                given.add(name)
        opts = ModelOptions(**{name: kwargs.pop(name) for name, _, _ in MODEL_OPTIONS}, explicit=frozenset(given))
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
    from qkv_cli.config import MAX_WIDTH

    if tau > MAX_WIDTH:  # Settings refuses it too; here, before a list of tau heads is built
        raise QkvError(f"tau ({tau}) is too large: at most {MAX_WIDTH}")
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
    batch: Annotated[
        bool, typer.Option("--batch", help="One sentence per line: run together, padded to the longest, pads masked.")
    ] = False,
):
    """Run masked multi-head attention on TEXT and print each head's weights (or other matrices).

    With no TEXT and no --file, uses a built-in sample sentence."""
    from qkv_cli import views

    names = parse_show(show)
    views.check_npz_path(save_npz)
    model = opts.checkpoint()
    if model is not None:
        from qkv_cli import model_views

        if batch:
            raise QkvError("--batch works on random weights: with --model, run one sentence at a time")
        heads = parse_heads(head, model.config.n_heads)
        run_ = opts.compute_model(model, text, default=views.default_text(), all_layers=format != Format.table)
        return model_views.emit_run(run_, names, heads, precision, format.value, save_npz)
    heads = parse_heads(head, opts.tau)
    if batch:
        from qkv_cli.learn_views import emit_batch

        return emit_batch(opts.compute_batch(text), names, heads, precision, format.value, save_npz)
    result = opts.compute(text, default=views.default_text(), band_ok=True)
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

    model = opts.checkpoint()
    if model is not None:
        from qkv_cli import model_views

        heads = parse_heads(head, model.config.n_heads)
        views.check_image_path(out, len(heads) if opts.layer else 1)
        run_ = opts.compute_model(model, text, default=views.default_text())
        return typer.echo(model_views.save_heatmap(run_, heads, bool(opts.layer), out))
    heads = parse_heads(head, opts.tau)
    views.check_image_path(out, len(heads))
    result = opts.compute(text, default=views.default_text(), band_ok=True)
    typer.echo(views.save_heatmap(result, heads, out))


@app.command(epilog="Example: qkv shapes --d 512 --tau 8 --m 30")
def shapes(
    ctx: typer.Context,
    text: TextArg = None,
    d: DOpt = 512,
    tau: TauOpt = 8,
    m: Annotated[int | None, typer.Option("--m", min=1, help="Number of tokens m (default 30, or TEXT's).")] = None,
    n: Annotated[int | None, typer.Option("--n", min=1, help="Key/value positions n (default m).")] = None,
    dtype: DtypeOpt = Dtype.float64,
    tokenizer: TokenizerOpt = "word",
    format: Annotated[Format, typer.Option("--format", help="table or json.")] = Format.table,
    kv_heads: KvHeadsOpt = None,
    context: ContextOpt = None,
    context_file: ContextFileOpt = None,
    model: ModelOpt = None,
):
    """Print the shape, parameters, FLOPs and bytes of every matrix in masked multi-head attention."""
    from qkv_cli import shapes_view
    from qkv_cli.cross import get_context

    if model is not None:
        fixed = {"d": "--d", "tau": "--heads", "n": "--n", "tokenizer": "--tokenizer", "kv_heads": "--kv-heads",
                 "context": "--context", "context_file": "--context-file"}  # fmt: skip
        given = [flag for name, flag in fixed.items() if ctx.get_parameter_source(name).name != "DEFAULT"]
        if given:  # as on run, heatmap and heads: never silently show other numbers than the user asked for
            raise QkvError(
                f"{given[0]} cannot be used with --model: the checkpoint fixes d, the heads and the tokenizer"
            )
        return shapes_view.emit_model(model, text, m, dtype.value, format.value)

    context = get_context(context, context_file, text == "-")
    shapes_view.emit(text, d, tau, m, n, dtype.value, tokenizer, format.value, kv_heads=kv_heads, context=context)


@app.command(epilog="Example: qkv explain 'the cat sat' --query 1")
@model_options(d=8, tau=2)
def explain(
    text: TextArg = None,
    *,
    opts: ModelOptions,
    head: Annotated[int, typer.Option("--head", min=0, help="The head to walk through, 0..tau-1.")] = 0,
    query: Annotated[
        int | None, typer.Option("--query", min=0, help="Zoom into query I: each q_i . k_t, softmax, sum of v_t.")
    ] = None,
    precision: PrecisionOpt = 2,
    format: TableJsonOpt = TableJson.table,
):
    """Walk one head step by step: H, W_j^q/k/v, Q, K, V, scores, Mask, weights, head output, concat, W^o.

    With --model, one head (--head, default 0) of one layer (--layer, default the last) of the checkpoint,
    biases included."""
    from qkv_cli import explain_view
    from qkv_cli.explain import check_head

    model = opts.checkpoint()
    if model is not None:
        if opts.layer and len(set(opts.layer)) > 1:
            raise QkvError("explain walks one layer: give one --layer (qkv run --model takes several)")
        check_head(head, model.config.n_heads)
        run_ = opts.compute_model(model, text, default=explain_view.default_text())
        return explain_view.emit(run_.results[run_.layers[0]], head, query, precision, format.value)
    check_head(head, opts.tau)
    result = opts.compute(text, default=explain_view.default_text())
    explain_view.emit(result, head, query, precision, format.value)


@app.command(epilog="Example: qkv mask 'the cat sat on the mat' --causal --window 3")
def mask(
    ctx: typer.Context,
    text: TextArg = None,
    file: FileOpt = None,
    causal: CausalOpt = False,
    window: WindowOpt = None,
    context: ContextOpt = None,
    context_file: ContextFileOpt = None,
    mask_file: MaskFileOpt = None,
    pad_to: Annotated[
        int | None, typer.Option("--pad-to", min=1, help="Pad the keys with [PAD] to this length, as a batch does.")
    ] = None,
    tokenizer: TokenizerOpt = "word",
    format: TableJsonOpt = TableJson.table,
    model: ModelOpt = None,
    download: DownloadOpt = False,
):
    """Print the combined Mask, each removed cell labelled by the rule that removed it. With no TEXT, a sample.

    With --model, the checkpoint's own mask over its own tokens (BERT: nothing removed; GPT-2: causal)."""
    from qkv_cli import learn

    given = {name for name in ctx.params if ctx.get_parameter_source(name).name not in ("DEFAULT", "DEFAULT_MAP")}
    if model is not None:
        from qkv_cli import checkpoint

        checkpoint.check_options(given)
        return learn.mask_model_command(model, text, file, download, format.value)
    if download:
        raise QkvError("--download needs --model: it fetches a real checkpoint (see qkv models)")
    learn.mask_command(text, file, causal, window, context, context_file, mask_file, pad_to, tokenizer, format.value)


@app.command(epilog="Example: qkv heads --file sample_texts/coreference.txt --d 64 --tau 4")
@model_options
def heads(
    text: TextArg = None,
    *,
    opts: ModelOptions,
    format: FormatOpt = Format.table,
):
    """Head roles: entropy, distance, share on self / previous / first token, and a label per head.

    With --file, one sentence per line, aggregated over all lines. With no TEXT, a sample sentence."""
    from qkv_cli import learn, views

    model = opts.checkpoint()
    if model is not None:
        from qkv_cli.checkpoint import emit_roles

        return emit_roles(model, text, opts.file, views.default_text(), opts.kernel, format.value)
    results = opts.compute_each(text, default=views.default_text())
    learn.emit_roles(results, format.value)


@app.command(epilog="Example: qkv models --format json")
def models(format: TableJsonOpt = TableJson.table):
    """List the checkpoints qkv can find: the Hugging Face cache and installed packages that ship one."""
    from qkv_cli.model_views import emit_models

    emit_models(format.value)


def main():
    app(prog_name="qkv")


if __name__ == "__main__":
    main()
