"""`qkv attribute`: token-to-token attribution beyond the raw weights (pipeline.attribution, views.attribution)."""

from qkv_cli.cli.app import app
from qkv_cli.cli.encdec import ENCDEC
from qkv_cli.cli.options import (
    BUDGET,
    CHAT,
    CHECKPOINT,
    CROSS,
    MASKS,
    RANDOM,
    TEXT,
    Format,
    FormatOpt,
    HeadFusionOpt,
    HeadOpt,
    Method,
    MethodOpt,
    PrecisionOpt,
    SaveNpzOpt,
    TextArg,
)  # fmt: skip
from qkv_cli.cli.outputs import MaxOutputOpt
from qkv_cli.cli.params import Opts, request, takes

VALUE_NORM = Method("value-norm")  # the default: the one method that also works on random weights


@app.command(
    epilog="Example: qkv attribute 'The cat sat on the mat.' --method value-norm --heads 4 (or --model M, any method)"
)
@takes(TEXT, RANDOM, MASKS, CROSS, CHECKPOINT, CHAT, BUDGET, ENCDEC)
def attribute(text: TextArg = None, *, opts: Opts, method: MethodOpt = VALUE_NORM,
              head_fusion: HeadFusionOpt = None, head: HeadOpt = None, precision: PrecisionOpt = 2,
              format: FormatOpt = Format.table, save_npz: SaveNpzOpt = None,
              max_output: MaxOutputOpt = None):  # fmt: skip
    """How much each key moves each query, beside the raw weights: rollout, value norms or value zeroing.

    --layer L (default the last) is the layer attributed (rollout: up to it). With no TEXT, a sample sentence."""
    from qkv_cli.api.arguments import parse_max_output
    from qkv_cli.api.commands import attributed_heads, check_attribution, execute
    from qkv_cli.cli.params import noted, prepare, sample
    from qkv_cli.views.export.writing import check_output_path
    from qkv_cli.views.kinds import emit

    limit = parse_max_output(max_output)
    if save_npz is not None:
        check_output_path(save_npz)
    req = request(opts, text, sample(), method=(method or VALUE_NORM).value,
                  head_fusion=head_fusion and head_fusion.value)  # fmt: skip
    model, heads = prepare(req, head)
    check_attribution(format.value, limit, req, model, len(heads))  # before the run: the text's tokens counted
    shown = attributed_heads(req.attribution.method, head, heads)
    emit(noted(execute(req, model).result), None, shown, precision, format.value, save_npz)
