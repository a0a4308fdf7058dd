"""`qkv view`: one self-contained interactive HTML page of a run (head view, model view, matrix view)."""

from pathlib import Path
from typing import Annotated

import typer

from qkv_cli.cli.app import app
from qkv_cli.cli.commands import DRAWN
from qkv_cli.cli.options import BatchOpt, HeadFusionOpt, MethodOpt, TextArg
from qkv_cli.cli.outputs import MaxPageOpt
from qkv_cli.cli.params import Opts, noted, prepare, request, sample, takes

PageOpt = Annotated[str, typer.Option("--out", "-o", help="The page to write: .html or .htm.")]
OpenOpt = Annotated[bool, typer.Option("--open", help="Also open the page in the web browser.")]


@app.command(epilog="Example: qkv view 'The cat sat on the mat.' --heads 4 --causal --out cat.html")
@takes(*DRAWN)
def view(text: TextArg = None, *, opts: Opts, out: PageOpt = "attention.html", open_: OpenOpt = False,
         max_page_size: MaxPageOpt = "100MB", batch: BatchOpt = False, method: MethodOpt = None,
         head_fusion: HeadFusionOpt = None):  # fmt: skip
    """Write one self-contained HTML page (offline, no network) to explore the attention weights: a head view,
    a model view of every layer and head, a matrix view with each cell's numbers. With no TEXT, a sample.

    With --generate N, what each written token read; with --method, the layer's weights beside that attribution."""
    from qkv_cli.api.arguments import size_of
    from qkv_cli.api.commands import execute
    from qkv_cli.api.show import page
    from qkv_cli.views.page.html import check_page_path, write_page

    check_page_path(out)
    limit = size_of(max_page_size, "--max-page-size")
    req = request(opts, text, sample(), batch=batch, band=True, method=method and method.value,
                  head_fusion=head_fusion and head_fusion.value)  # fmt: skip
    model, _ = prepare(req, None)
    first = opts.layer[0] if opts.layer and req.generation.tokens else None  # the layer a generation's page shows first
    if first is not None and model is not None:  # checked before the model writes
        from qkv_cli.api.commands import check_layer

        check_layer(first, model.decoder_shape[0])
    run = execute(req, model)
    noted(run.result)
    shown = page(run, layer=first)
    typer.echo(write_page(shown.html, shown.holds, out, limit), err=True)
    if open_:
        import webbrowser

        webbrowser.open(Path(out).resolve().as_uri())
