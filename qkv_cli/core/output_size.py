"""How much a printed or written output holds, known before the forward: layers x heads x rows x columns of each
matrix named by --show, in the text of --format json or csv. Above --max-output the run is refused, before any
weight is read (no numpy here: this runs before anything is allocated)."""

from __future__ import annotations

from dataclasses import dataclass

from qkv_cli.core.budget import human, parse_size, without
from qkv_cli.errors import TooLargeError

DEFAULT_MAX_OUTPUT = 256_000_000  # bytes: 256 MB of JSON or CSV text
JSON_NUMBER = 22  # bytes a number takes in a JSON array: repr of a float64 (17 digits, "0." or an exponent) + ", "
CSV_FIXED = 30  # a CSV row beside its two labels: the value (repr), layer, matrix, head, query, key, 7 commas, "\n"
NPZ_NUMBER = 4  # --save-npz: float32 (8 with --dtype float64)
FORMATS = ("json", "csv")


@dataclass(frozen=True)
class Output:
    """What the output of a run will be: its format (json or csv), the matrices of --show, the limit in bytes."""

    fmt: str
    show: tuple[str, ...] = ("weights",)
    limit: int = DEFAULT_MAX_OUTPUT
    heads: tuple[int, ...] | None = None  # the heads shown (--head; None: every head)
    checkpoint: bool = True  # a checkpoint's JSON also holds `attentions`, every kept layer's weights
    shown_layers: int = 1  # the layers a generation's rows rank what each token read in (qkv generate --layer)

    def __post_init__(self):
        if self.fmt not in FORMATS:
            raise ValueError(f"Output.fmt must be one of {FORMATS}, got {self.fmt!r}")


@dataclass(frozen=True)
class Layout:
    """The sizes of one run's matrices: R query rows, n keys, d, d_k, tau shown heads, G key/value heads, the
    layers detailed, and the kept weights `attentions` (layers, heads: JSON of a checkpoint only)."""

    R: int
    n: int
    d: int
    d_k: int
    tau: int
    G: int
    layers: int = 1
    kept_layers: int = 0
    kept_heads: int = 0
    label: float = 6.0  # mean characters of a token's label (CSV writes two per grid cell)
    extra: int = 0  # numbers the JSON holds beside these (an encoder-decoder's three attentions)


def numbers(name: str, s: Layout) -> int:
    """How many numbers one layer's matrix `name` (a --show name) holds."""
    grid, vector = s.R * s.n, s.d_k
    return {
        "weights": s.tau * grid, "scores": s.tau * grid, "mask": grid, "q": s.tau * s.R * vector,
        "heads": s.tau * s.R * vector, "k": s.G * s.n * vector, "v": s.G * s.n * vector, "output": s.R * s.d,
        "h": s.R * s.d,
    }.get(name, 0)  # fmt: skip


def output_bytes(out: Output, s: Layout) -> int:
    """About how many bytes the output will be: every layer's matrices of --show (and in a checkpoint's JSON the
    kept weights `attentions` and the last hidden state)."""
    if out.fmt == "json":
        count = s.layers * sum(numbers(name, s) for name in out.show)
        if out.checkpoint:
            count += s.kept_layers * s.kept_heads * s.R * s.n + s.n * s.d + s.extra
        return count * JSON_NUMBER
    digits = 2 * len(str(max(s.R, s.n)))
    per = {name: CSV_FIXED + digits + s.label + (s.label if name in ("weights", "scores", "mask") else 0)
           for name in out.show}  # fmt: skip
    return int(s.layers * sum(numbers(name, s) * per[name] for name in out.show))


def what(s: Layout, out: Output) -> str:
    """ "30 layers x 9 heads x 128 rows x 8,192 keys": the shape behind the size."""
    layers = max(s.layers, s.kept_layers if out.fmt == "json" and out.checkpoint else 0)
    heads = max(s.tau, s.kept_heads if out.fmt == "json" and out.checkpoint else 0)
    shown = ", ".join(out.show)
    return (f"{layers:,} layer{'s' if layers != 1 else ''} x {heads} head{'s' if heads != 1 else ''} x {s.R:,} "
            f"rows x {s.n:,} keys of --show {shown}")  # fmt: skip


HINTS = "--layer, --head, --rows, or --save-npz FILE"


def check_output(out: Output | None, s: Layout, given=(), itemsize: int = NPZ_NUMBER, hints: str = HINTS) -> int:
    """TooLargeError when the output would exceed out.limit; the ways to shrink it, less those given (e.g.
    ("--layer",)). Returns the size (0 without an output to bound)."""
    if out is None:
        return 0
    size = output_bytes(out, s)
    if size <= out.limit:
        return size
    shrink = without(hints, given)
    every = ("h", "q", "k", "v", "scores", "mask", "weights", "heads", "output")  # the NPZ: one layer's detail
    npz = human(
        itemsize * (sum(numbers(name, s) for name in every) + s.kept_layers * s.kept_heads * s.R * s.n + s.extra)
    )
    shrink = shrink.replace("--save-npz FILE", f"--save-npz FILE (binary: {npz}) instead of --format {out.fmt}")
    raise too_large(f"{out.fmt.upper()} output", size, what(s, out), out.limit, "--max-output", shrink)


def check_count(fmt: str, count: int, limit: int, shape: str, hints: str, label: float = 6.0) -> int:
    """The same rule for an output counted as `count` numbers (a grid's cells: CSV writes two labels a row):
    TooLargeError above `limit` bytes, naming the size, the `shape` behind it and the `hints`. Returns the size."""
    per = JSON_NUMBER if fmt == "json" else CSV_FIXED + 2 * label
    return check_size(fmt, int(count * per), limit, shape, hints)


def check_size(fmt: str, size: int, limit: int, shape: str, hints: str) -> int:
    """An output of `size` bytes in `fmt` against --max-output: TooLargeError above `limit`. Returns the size."""
    if size > limit:
        raise too_large(f"{fmt.upper()} output", size, shape, limit, "--max-output", hints)
    return size


def too_large(what: str, size: int, shape: str, limit: int, option: str, hints: str) -> TooLargeError:
    """The one refusal of an output above its limit, for the numbers printed or written (--max-output) and the page
    (--max-page-size) alike: its size, what makes it, the limit, the ways to shrink it and the limit that would let
    it through. option: the CLI's flag, or the Python API's keyword (then the example is a keyword argument)."""
    more = human(2 * size).replace(" ", "")
    raised = f"{option} {more}" if option.startswith("--") else f"{option}={more!r}"
    return TooLargeError(f"the {what} would be about {human(size)} ({shape}), more than {option} {human(limit)}: "
                         f"shrink it with {hints}, or raise the limit, e.g. {raised}")  # fmt: skip


def parse_max_output(text: str | int | None) -> int:
    """--max-output as bytes ("1GB", "500MiB", a number of bytes); None: the default, 256 MB."""
    return DEFAULT_MAX_OUTPUT if text is None else parse_size(str(text), "--max-output")
