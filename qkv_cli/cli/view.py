"""`qkv view`: one self-contained interactive HTML page of a run (head view, model view, matrix view)."""

from pathlib import Path
from typing import Annotated

import typer

from qkv_cli.cli.app import app
from qkv_cli.cli.commands import EVERYTHING, prepare, sample
from qkv_cli.cli.options import BatchOpt, TextArg
from qkv_cli.cli.params import Opts, request, takes

PageOpt = Annotated[str, typer.Option("--out", "-o", help="The page to write: .html or .htm.")]
OpenOpt = Annotated[bool, typer.Option("--open", help="Also open the page in the web browser.")]


@app.command(epilog="Example: qkv view 'The cat sat on the mat.' --model sentence-transformers/all-MiniLM-L6-v2 --open")
@takes(*EVERYTHING)
def view(text: TextArg = None, *, opts: Opts, out: PageOpt = "attention.html", open_: OpenOpt = False,
         batch: BatchOpt = False):  # fmt: skip
    """Write one self-contained HTML page (offline, no network) to explore the attention weights: a head view,
    a model view of every layer and head, a matrix view with each cell's numbers. With no TEXT, a sample."""
    from qkv_cli.pipeline.compute import compute
    from qkv_cli.views.html import check_page_path, save_page

    check_page_path(out)
    req = request(opts, text, sample(), batch=batch, band=True)
    model, _ = prepare(req, None)
    typer.echo(save_page(compute(req, model), out))
    if open_:
        import webbrowser

        webbrowser.open(Path(out).resolve().as_uri())
