"""The options that bound what a command prints or writes, in the one shape of core.output_size.too_large:
--max-output (the numbers of --format json or csv, known before the run) and --max-page-size (an HTML page)."""

from typing import Annotated

import typer

MaxOutputOpt = Annotated[str | None, typer.Option("--max-output", metavar="SIZE", help="Refuse a --format json "
                         "or csv output estimated above this, before the run, e.g. 1GB (default: 256MB).")]  # fmt: skip
MaxPageOpt = Annotated[str, typer.Option("--max-page-size", metavar="SIZE", help="Refuse to write a page larger "
                       "than this, e.g. 200MB (default: 100MB).")]  # fmt: skip
