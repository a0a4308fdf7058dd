"""One short function per command: parse, compute, view. Heavy modules are imported inside them."""

from typing import Annotated

import typer

from qkv_cli.cli.app import app
from qkv_cli.cli.encdec import ENCDEC
from qkv_cli.cli.figure_options import (
    AnnotateOpt,
    CmapOpt,
    Colormap,
    DpiOpt,
    NoSubtitleOpt,
    SubtitleOpt,
    TitleOpt,
    figure_style,
)
from qkv_cli.cli.options import (
    ABLATION,
    BUDGET,
    CHAT,
    CHECKPOINT,
    CROSS,
    DETECTORS,
    GENERATION,
    MASK_CHECKPOINT,
    MASKS,
    PREDICTION,
    RANDOM,
    SHOW_CHOICES,
    TEXT,
    AscendingOpt,
    BatchOpt,
    CausalOpt,
    ChunkOpt,
    ContextFileOpt,
    ContextOpt,
    DOpt,
    DownloadOpt,
    DtypeOpt,
    FileOpt,
    Format,
    FormatOpt,
    HeadFusionOpt,
    HeadOpt,
    HeadSortOpt,
    KvHeadsOpt,
    LayerOpt,
    MaskFileOpt,
    MethodOpt,
    ModelOpt,
    MOpt,
    NOpt,
    OutOpt,
    PadToOpt,
    PrecisionOpt,
    SaveNpzOpt,
    ShowOpt,
    TableJson,
    TableJsonOpt,
    TauOpt,
    TextArg,
    TokenizerOpt,
    TopOpt,
    WindowOpt,
    choices,
)  # fmt: skip
from qkv_cli.cli.outputs import MaxOutputOpt
from qkv_cli.cli.params import Opts, noted, parse_show, prepare, request, sample, takes
from qkv_cli.errors import QkvError

RowsOpt = Annotated[
    str | None,
    typer.Option("--rows", metavar="TEXT", help="With --model: keep only these query positions' weights, a Python "
                 "slice (0:16; -128: for the last 128): long documents fit where every row would not."),
]  # fmt: skip
ROWS = [("rows", RowsOpt, None)]
EVERYTHING = (TEXT, RANDOM, MASKS, CROSS, ABLATION, CHECKPOINT, CHAT, BUDGET, ENCDEC)
DRAWN = (*EVERYTHING, GENERATION)  # a figure or a page may also draw a decoder's generation


@app.command(epilog="Example: qkv run 'The animal did not cross the street because it was tired.' --heads 8 --causal")
@takes(*EVERYTHING, PREDICTION, ROWS)
def run(text: TextArg = None, *, opts: Opts, head: HeadOpt = None, show: ShowOpt = "weights",
        precision: PrecisionOpt = 2, format: FormatOpt = Format.table, save_npz: SaveNpzOpt = None,
        batch: BatchOpt = False, max_output: MaxOutputOpt = None):  # fmt: skip
    """Run masked multi-head attention on TEXT and print each head's weights (or other matrices).

    With no TEXT and no --file, uses a built-in sample sentence."""
    from qkv_cli.api.arguments import output_of, parse_max_output
    from qkv_cli.api.commands import execute
    from qkv_cli.views.export.writing import check_output_path
    from qkv_cli.views.kinds import emit

    names = parse_show(show, SHOW_CHOICES)
    limit = parse_max_output(max_output)
    if save_npz is not None:
        check_output_path(save_npz)
    req = request(opts, text, sample(), batch=batch, band=True, all_layers=format != Format.table, narrow=True)
    model, heads = prepare(req, head)
    if "experts" in names:  # a mixture of experts' routing: only where a router chose
        from qkv_cli.views.console.experts import check

        check(model)
    if head and model is not None and not model.is_encoder_decoder:  # the exports keep only these heads' weights
        req = req.changed(heads=tuple(heads))
    stream = None
    if format != Format.table:  # its size known before the run; a checkpoint's layers written as they are made
        from qkv_cli.views.streaming import LayerWriter

        shown = tuple(n for n in names if n != "experts")
        req = req.changed(
            output=output_of(format.value, shown, limit, tuple(heads) if head else None, model is not None)
        )
        stream = LayerWriter(format.value, names, heads) if model is not None else None
    emit(noted(execute(req, model, on_layer=stream).result), names, heads, precision, format.value, save_npz, stream)


ColorScale = choices("ColorScale", ("linear", "sqrt", "log"))  # views.figures.heatmaps.SCALES (a test checks)
ColorScaleOpt = Annotated[
    ColorScale,
    typer.Option("--color-scale", help="Colour scale of the weights: linear, sqrt (power 0.5) or log (from 1e-4): "
                 "long texts, whose weights are all small, read better with sqrt or log."),
]  # fmt: skip


@app.command(epilog="Example: qkv heatmap --causal --heads 4 --out causal.png")
@takes(*DRAWN)
def heatmap(text: TextArg = None, *, opts: Opts, head: HeadOpt = None, out: OutOpt = "attention.png",
            method: MethodOpt = None, head_fusion: HeadFusionOpt = None,
            color_scale: ColorScaleOpt = ColorScale.linear, title: TitleOpt = None, subtitle: SubtitleOpt = None,
            no_subtitle: NoSubtitleOpt = False, dpi: DpiOpt = 110, cmap: CmapOpt = Colormap.viridis,
            annotate: AnnotateOpt = False):  # fmt: skip
    """Save a grid of per-head attention heatmaps (PNG, SVG or PDF). With no TEXT, uses a built-in sample.

    With --method, the layer's weights beside that attribution (see qkv attribute)."""
    from qkv_cli.api.commands import attributed_heads, execute, panel_size
    from qkv_cli.api.show import figure
    from qkv_cli.views.figures.heatmaps import check_image_path, save_figure

    look = figure_style(title, subtitle, no_subtitle, dpi, cmap, annotate)
    req = request(opts, text, sample(), band=True, method=method and method.value,
                  head_fusion=head_fusion and head_fusion.value)  # fmt: skip
    model, heads = prepare(req, head)
    if method is not None:  # the weights, the attribution, and per-head panels only when asked
        heads = attributed_heads(req.attribution.method, head, heads)
    one = method is None and model is not None and not (opts.layer and not req.generation.tokens)
    check_image_path(out, 1 if one else len(heads) + (2 if method else 0))
    at = opts.layer[0] if opts.layer else None
    if look.annotate and (size := panel_size(req, model)) is not None:  # refused before the run, not after
        from qkv_cli.views.figures.style import check_annotate, styled

        with styled(look):
            check_annotate(*size)
    run = execute(req, model)
    noted(run.result)
    save_figure(figure(run.result, heads, at, color_scale.value, look), out)
    typer.echo(out)


@app.command(epilog="Example: qkv shapes --d 512 --tau 8 --m 30")
@takes()
def shapes(text: TextArg = None, *, opts: Opts, d: DOpt = 512, tau: TauOpt = 8,
           m: MOpt = None, n: NOpt = None,
           dtype: DtypeOpt = "float64", tokenizer: TokenizerOpt = "word", format: TableJsonOpt = TableJson.table,
           kv_heads: KvHeadsOpt = None, context: ContextOpt = None, context_file: ContextFileOpt = None,
           model: ModelOpt = None, download: DownloadOpt = False):  # fmt: skip
    """Print the shape, parameters, FLOPs and bytes of every matrix in masked multi-head attention."""
    from qkv_cli.api.plans import shape_plan
    from qkv_cli.views.console.shapes import emit

    dtype = getattr(dtype, "value", dtype)
    emit(shape_plan(text, model, d=d, heads=tau, m=m, n=n, dtype=dtype, tokenizer=tokenizer, kv_heads=kv_heads,
                    context=context, context_file=context_file, download=download), format.value)  # fmt: skip


@app.command(epilog="Example: qkv explain 'the cat sat' --query 1")
@takes(*EVERYTHING, d=8, tau=2)
def explain(text: TextArg = None, *, opts: Opts,
            head: Annotated[int, typer.Option("--head", min=0, help="The head to walk through, 0..tau-1.")] = 0,
            query: Annotated[int | None, typer.Option("--query", min=0,
                             help="Zoom into query I: each q_i . k_t, softmax, sum of v_t.")] = None,
            precision: PrecisionOpt = 2, format: TableJsonOpt = TableJson.table,
            max_output: MaxOutputOpt = None):  # fmt: skip
    """Walk one head step by step: H, W_j^q/k/v, Q, K, V, scores, Mask, weights, head output, concat, W^o.

    With --model, one head (--head, default 0) of one layer (--layer, default the last) of the checkpoint,
    biases included."""
    from qkv_cli.api.arguments import parse_max_output
    from qkv_cli.api.commands import check_explain, execute
    from qkv_cli.views.console.explain import emit

    if opts.layer and len(set(opts.layer)) > 1:
        raise QkvError("explain walks one layer: give one --layer (qkv run --model takes several)")
    limit = parse_max_output(max_output)
    req = request(opts, text, sample("short"))
    model, _ = prepare(req, [head])
    check_explain(format.value, limit, req, model)  # before the run: the text's tokens counted
    emit(noted(execute(req, model).result).first_layer(), head, query, precision, format.value)


@app.command(epilog="Example: qkv mask 'the cat sat on the mat' --causal --window 3")
@takes(TEXT, MASK_CHECKPOINT, CHAT, ENCDEC)
def mask(text: TextArg = None, *, opts: Opts, causal: CausalOpt = False, window: WindowOpt = None,
         chunk: ChunkOpt = None, context: ContextOpt = None, context_file: ContextFileOpt = None,
         mask_file: MaskFileOpt = None, pad_to: PadToOpt = None, tokenizer: TokenizerOpt = "word",
         format: TableJsonOpt = TableJson.table, max_output: MaxOutputOpt = None):  # fmt: skip
    """Print the combined Mask, each removed cell labelled by the rule that removed it. With no TEXT, a sample.

    With --model, the checkpoint's own mask over its own tokens (BERT: nothing removed; GPT-2: causal; a sliding
    window on the layers that have one)."""
    from qkv_cli.api.arguments import output_of, parse_max_output
    from qkv_cli.api.plans import mask_grids
    from qkv_cli.views.console.mask import emit

    output = output_of(format.value, (), parse_max_output(max_output)) if format != TableJson.table else None
    if opts.model is not None:
        from qkv_cli.api.arguments import read_text
        from qkv_cli.cli.params import chat_options

        text = read_text(text, opts.file, sample("short"))
        grids = mask_grids(text, opts.model, layers=opts.layer, chat=chat_options(opts), target=opts.target,
                           attention=opts.attention and opts.attention.value, download=opts.download,
                           output=output)  # fmt: skip
        return emit(noted(grids), format.value)
    emit(mask_grids(text, file=opts.file, causal=causal, window=window, chunk=chunk, context=context,
                    context_file=context_file, mask_file=mask_file, pad_to=pad_to, tokenizer=tokenizer,
                    output=output), format.value)  # fmt: skip


@app.command(epilog="Example: qkv heads --file sample:coreference --d 64 --tau 4")
@takes(TEXT, RANDOM, MASKS, ABLATION, CHECKPOINT, CHAT, BUDGET, DETECTORS, ENCDEC)
def heads(text: TextArg = None, *, opts: Opts, format: FormatOpt = Format.table, sort: HeadSortOpt = None,
          ascending: AscendingOpt = False, top: TopOpt = None):  # fmt: skip
    """Head roles: entropy, distance, share on self / previous / first / next token, a sink, TransformerLens'
    previous-token, duplicate-token and induction scores, and a label per head.

    With --file, one sentence per line, aggregated over all lines. With no TEXT, a sample sentence."""
    from qkv_cli.api.commands import execute_each
    from qkv_cli.views.console.heads import emit_roles

    if ascending and sort is None:
        raise QkvError("--ascending orders by a column: give --sort COLUMN too")
    req = request(opts, text, sample(), induction_probe=opts.induction_probe or 0)
    roles = noted([run.result for run in execute_each(req)])
    emit_roles(roles, format.value, dict(measure=opts.detector_measure.value, probe=req.inputs.induction_probe,
               exclude_first=opts.exclude_first, exclude_current=opts.exclude_current, show=opts.detectors,
               seed=req.settings.seed, layers=req.keep.layers, sort=sort and sort.value, ascending=ascending,
               top=top))  # fmt: skip


@app.command(epilog="Example: qkv models --format json")
def models(format: TableJsonOpt = TableJson.table):
    """List the checkpoints qkv can find: the Hugging Face cache, installed packages that ship one, and the GGUF
    models of ollama's and LM Studio's stores."""
    from qkv_cli.api.plans import find_models
    from qkv_cli.views.model import emit_models

    emit_models(find_models(), format.value)


_ = (FileOpt, LayerOpt)  # re-exported option types used by the sets
