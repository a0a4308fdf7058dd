"""Every command-line option, declared once as an Annotated alias, and the option sets commands choose from.

Choices come from the registries (kernels, dtypes ...), so a new kernel is offered by --kernel, listed in its
metavar `[vectorized|loop|...]` and completed by the shell without an edit here. Metavars say what to type (INTEGER,
PATH, [a|b]); app.py gives the same kind of metavar to an option declared elsewhere without one.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

import typer

from qkv_cli.api.choices import (
    ABLATE,
    ABLATE_WITH,
    DTYPES,
    FUSIONS,
    KERNELS,
    METHODS,
    POSITIONS,
    PROJECTIONS,
    TOKENIZERS,
)


def choices(name: str, values) -> type[StrEnum]:
    return StrEnum(name, {v: v for v in values})


def one_of(values, *more: str) -> str:
    """The metavar of a choice: `[vectorized|loop|reference]`; `more` adds free forms (NUMBER, PATH)."""
    return "[" + "|".join([*values, *more]) + "]"


def completing(*values: str):
    """Shell completion of a free-form option's named values (--kernel, --scale, --tokenizer)."""

    def complete(incomplete: str) -> list[str]:
        return [v for v in values if v.startswith(incomplete)]

    return complete


def integers(values: list[str] | None) -> list[int] | None:
    """--head 0,2 and --head 0 --head 2 alike (also --layer): each value is one integer or a comma list of them."""
    if not values:
        return None
    found = []
    for value in values:
        for piece in str(value).split(","):
            try:
                found.append(int(piece.strip()))
            except ValueError:
                raise typer.BadParameter(f"{piece.strip()!r} is not an integer: give e.g. 0, or 0,2") from None
    return found


Dtype = choices("Dtype", DTYPES)
Positions = choices("Positions", POSITIONS)
Projection = choices("Projection", PROJECTIONS)
Ablate = choices("Ablate", ABLATE)
AblateWith = choices("AblateWith", ABLATE_WITH)
Format = choices("Format", ("table", "json", "csv"))
TableJson = choices("TableJson", ("table", "json"))

SHOW_CHOICES = ("q", "k", "v", "scores", "mask", "weights", "output", "heads", "h", "experts")
SCALES = ("auto", "none", "sqrt")  # the names core.kernels.resolve_scale takes (a test checks); or any number
INT, PATH = "INTEGER", "PATH"

TextArg = Annotated[
    str | None, typer.Argument(metavar="TEXT", help="Text to inspect, in quotes ('-' reads stdin).", show_default=False)
]
FileOpt = Annotated[
    str | None, typer.Option("--file", "-f", metavar=PATH, help="Read the text from a UTF-8 file ('-' = stdin).")
]
DOpt = Annotated[int, typer.Option("--d", min=1, help="Model width d (columns of H).")]
TauOpt = Annotated[int, typer.Option("--heads", "--tau", min=1, help="Number of heads tau; d_k = d / tau.")]
SeedOpt = Annotated[int, typer.Option(min=0, help="Seed for token vectors and projections.")]
KernelOpt = Annotated[
    str,
    typer.Option(metavar=one_of(KERNELS), autocompletion=completing(*KERNELS),
                 help="Attention kernel (every one gives the same numbers)."),
]  # fmt: skip
CausalOpt = Annotated[bool, typer.Option("--causal", help="Causal mask V_<=i: query i sees keys 0..i.")]
WindowOpt = Annotated[
    int | None, typer.Option(min=1, help="Sliding window n_c: query i sees keys i-n_c+1..i (implies causal).")
]
ChunkOpt = Annotated[int | None, typer.Option(min=1, help="Chunked attention n_ch (Llama 4): query i sees keys "
                     "n_ch floor(i / n_ch)..i, its own chunk (implies causal).")]  # fmt: skip
ScaleOpt = Annotated[
    str,
    typer.Option(metavar=one_of(SCALES, "NUMBER"), autocompletion=completing(*SCALES),
                 help="auto = 1/sqrt(d_k), none = 1, sqrt = sqrt(d_k) (the misprint), or a number."),
]  # fmt: skip
PositionsOpt = Annotated[Positions, typer.Option(help="Add sinusoidal positional encodings to H, or none.")]
ProjectionOpt = Annotated[Projection, typer.Option(help="random (seeded Glorot) W_j^q/k/v, or identity: Q = K = V "
                                                  "= slices of H.")]  # fmt: skip
DtypeOpt = Annotated[Dtype, typer.Option(help="Floating point type.")]
TokenizerOpt = Annotated[
    str,
    typer.Option(metavar=one_of(TOKENIZERS, PATH), autocompletion=completing(*TOKENIZERS),
                 help="word, bpe, or a path to a Hugging Face tokenizer.json."),
]  # fmt: skip
MaxMemoryOpt = Annotated[str | None, typer.Option("--max-memory", metavar="SIZE", help="Refuse runs estimated "
                         "above this, e.g. 2GB (default: half the RAM).")]  # fmt: skip
HeadOpt = Annotated[list[str] | None, typer.Option("--head", metavar=INT, callback=integers, help="Head to show, "
                    "0..tau-1: --head 0,2 or --head 0 --head 2 (default all).")]  # fmt: skip
ShowOpt = Annotated[str, typer.Option(metavar="NAMES", help="Comma list of matrices to show: "
                   f"{','.join(SHOW_CHOICES)}.")]  # fmt: skip
PrecisionOpt = Annotated[int, typer.Option(min=0, max=12, help="Digits after the decimal point.")]
FormatOpt = Annotated[Format, typer.Option("--format", help="table, json or csv (on stdout).")]
TableJsonOpt = Annotated[TableJson, typer.Option("--format", help="table or json (on stdout).")]
SaveNpzOpt = Annotated[
    str | None, typer.Option("--save-npz", metavar=PATH, help="Also save every matrix to this .npz file.")
]
OutOpt = Annotated[str, typer.Option("--out", "-o", metavar=PATH, help="Image file: .png, .svg or .pdf.")]
ContextOpt = Annotated[str | None, typer.Option("--context", metavar="TEXT", help="Cross-attention: keys and "
                       "values from this text Y, queries from TEXT.")]  # fmt: skip
ContextFileOpt = Annotated[
    str | None,
    typer.Option("--context-file", metavar=PATH, help="Read the --context text from a UTF-8 file ('-' = stdin)."),
]
KvHeadsOpt = Annotated[
    int | None,
    typer.Option("--kv-heads", min=1, help="Grouped-query attention: G key/value heads shared by the tau query heads."),
]
MaskFileOpt = Annotated[
    str | None,
    typer.Option("--mask-file", metavar=PATH, help="Custom m x n mask: .npy boolean or a 0/1 text grid; 1 = may "
                 "attend."),
]  # fmt: skip
AblateOpt = Annotated[
    Ablate | None, typer.Option("--ablate", help="Replace Q, K or V (a projection's output) to see what changes.")
]
AblateWithOpt = Annotated[
    AblateWith, typer.Option("--ablate-with", help="zeros, or seeded noise with the matrix's own std.")
]
ModelOpt = Annotated[
    str | None,
    typer.Option(
        "--model",
        metavar="NAME|PATH",
        help="A real checkpoint: a folder with config.json, model.safetensors and tokenizer.json, a NAME in the "
        "Hugging Face cache (e.g. sentence-transformers/all-MiniLM-L6-v2), or an installed package that ships one "
        "(qkv models lists them).",
    ),
]


def layer_option(default: str, many: bool = True):
    """--layer, with what the command does without it (one type for every command: a list, read by `integers`)."""
    several = "; --layer 0,2 or --layer 0 --layer 2" if many else ""
    return Annotated[
        list[str] | None,
        typer.Option("--layer", metavar=INT, callback=integers,
                     help=f"With --model: layer 0..L-1 or -1{several} ({default})."),
    ]  # fmt: skip


LayerOpt = layer_option("default: the last for tables, explain and attribute; every layer for JSON, CSV, heads and "
                        "the model views of heatmap and view")  # fmt: skip
MaskLayerOpt = layer_option("default: the first layer of each kind of mask: layer 0 when every layer masks alike, "
                            "else e.g. a sliding-window layer and a full causal one")  # fmt: skip
DownloadOpt = Annotated[
    bool,
    typer.Option("--download", help="With --model NAME not in the cache: fetch it (pip install 'qkv-cli[download]')."),
]
BatchOpt = Annotated[
    bool, typer.Option("--batch", help="One sentence per line: run together, padded to the longest, pads masked.")
]
MOpt = Annotated[int | None, typer.Option("--m", min=1, help="Number of tokens m (default 30, or TEXT's).")]
NOpt = Annotated[int | None, typer.Option("--n", min=1, help="Key/value positions n (default m).")]
PadToOpt = Annotated[
    int | None, typer.Option("--pad-to", min=1, help="Pad the keys with [PAD] to this length, as a batch does.")
]

# Option sets: (parameter name, annotation, default). A command takes the sets that make sense for it.
TEXT = [("file", FileOpt, None)]
RANDOM = [
    ("d", DOpt, 512),
    ("tau", TauOpt, 8),
    ("seed", SeedOpt, 0),
    ("kernel", KernelOpt, "vectorized"),
    ("scale", ScaleOpt, "auto"),
    ("positions", PositionsOpt, Positions.sinusoidal),
    ("projection", ProjectionOpt, Projection.random),
    ("dtype", DtypeOpt, Dtype.float64),
    ("tokenizer", TokenizerOpt, "word"),
    ("kv_heads", KvHeadsOpt, None),
]
MASKS = [("causal", CausalOpt, False), ("window", WindowOpt, None), ("chunk", ChunkOpt, None),
         ("mask_file", MaskFileOpt, None)]  # fmt: skip
CROSS = [("context", ContextOpt, None), ("context_file", ContextFileOpt, None)]
ABLATION = [("ablate", AblateOpt, None), ("ablate_with", AblateWithOpt, AblateWith.zeros)]
CHECKPOINT = [("model", ModelOpt, None), ("layer", LayerOpt, None), ("download", DownloadOpt, False)]
MASK_CHECKPOINT = [("model", ModelOpt, None), ("layer", MaskLayerOpt, None), ("download", DownloadOpt, False)]
BUDGET = [("max_memory", MaxMemoryOpt, None)]
GenerateOpt = Annotated[
    int | None,
    typer.Option("--generate", min=1, help="With --model: a decoder writes N tokens; draw that."),
]
MaxNewOpt = Annotated[int, typer.Option("--max-new-tokens", min=1, help="Stop after N new tokens (or at end of text).")]
TemperatureOpt = Annotated[
    float, typer.Option("--temperature", min=0.0, help="0 = greedy; above 0: sample from Softmax(z / T), seeded.")
]
TopKOpt = Annotated[int, typer.Option("--top-k", min=0, help="Sample only among the K most probable tokens (0 = all).")]
PredictOpt = Annotated[bool, typer.Option("--predict", help="With a decoder: the top 5 next tokens at every position.")]
LensOpt = Annotated[
    bool, typer.Option("--logit-lens", help="With --predict: the same read out after every layer (final norm, head).")
]
SAMPLING = [("temperature", TemperatureOpt, 0.0), ("top_k", TopKOpt, 0)]
GENERATION = [("generate", GenerateOpt, None), *SAMPLING]
PREDICTION = [("predict", PredictOpt, False), ("logit_lens", LensOpt, False)]

# qkv attribute, heatmap --method: attribution beyond the raw weights; qkv heads: TransformerLens' head detectors
Method = choices("Method", METHODS)
HeadFusion = choices("HeadFusion", FUSIONS)
Measure = choices("Measure", ("mul", "abs"))  # core.detectors.MEASURES (a test checks), without importing NumPy
MethodOpt = Annotated[
    Method | None,
    typer.Option("--method", help="rollout (Abnar & Zuidema 2020; needs --model), value-norm (Kobayashi et al. 2020) "
                 "or value-zeroing (Mohebbi et al. 2023; needs --model)."),
]  # fmt: skip
HeadFusionOpt = Annotated[
    HeadFusion | None,
    typer.Option("--head-fusion", help="rollout: fuse the heads of a layer by mean (default), max or min."),
]
MeasureOpt = Annotated[
    Measure, typer.Option("--detector-measure", help="Head detectors: mul = sum(alpha P) / sum(alpha), "
                          "abs = 1 - mean|alpha - P| m.")
]  # fmt: skip
ExcludeFirstOpt = Annotated[
    bool, typer.Option("--exclude-first", help="Head detectors: leave out the weight on the first token (BOS, [CLS]).")
]
ExcludeCurrentOpt = Annotated[
    bool, typer.Option("--exclude-current", help="Head detectors: leave out each query's weight on itself.")
]
HEAD_COLUMNS = (
    "entropy",
    "norm_entropy",
    "max_weight",
    "mean_distance",
    "self",
    "previous",
    "first",
    "local",
    "softmax_grad",
    "next",
    "sink",
    "previous_token",
    "duplicate_token",
    "induction",
)  # views.console.heads' keys
HeadSort = choices("HeadSort", HEAD_COLUMNS)
HeadSortOpt = Annotated[
    HeadSort | None,
    typer.Option("--sort", help="Order the heads by this column, largest first (see --ascending); the JSON name.",
                 metavar=one_of(HEAD_COLUMNS)),
]  # fmt: skip
AscendingOpt = Annotated[bool, typer.Option("--ascending", help="With --sort: smallest first.")]
TopOpt = Annotated[
    int | None, typer.Option("--top", min=1, help="Keep only the first N heads (after --sort) in tables, JSON, CSV.")
]
ProbeOpt = Annotated[
    int | None,
    typer.Option("--induction-probe", min=1, help="With --model: N seeded random tokens repeated twice, instead of "
                 "the text, so induction heads show."),
]  # fmt: skip
DetectorsOpt = Annotated[
    bool, typer.Option("--detectors", help="Also show the next, sink and detector columns for random weights.")
]
DETECTORS = [("detector_measure", MeasureOpt, Measure.mul), ("exclude_first", ExcludeFirstOpt, False),
             ("exclude_current", ExcludeCurrentOpt, False), ("induction_probe", ProbeOpt, None),
             ("detectors", DetectorsOpt, False)]  # fmt: skip

# --chat on every command that reads text with a checkpoint (pipeline.chat); the other three imply --chat
ChatOpt = Annotated[
    bool,
    typer.Option("--chat", help="With --model: wrap TEXT as a user message in the chat template (needs jinja2); "
                 "stderr says what the template added (SmolLM2's adds a default system prompt)."),
]  # fmt: skip
SystemOpt = Annotated[
    str | None, typer.Option("--system", metavar="TEXT", help="--chat with this system message before TEXT.")
]
NoSystemOpt = Annotated[
    bool,
    typer.Option("--no-system", help="--chat with an empty system message, so a template that writes a default "
                 "system prompt writes none (it may still write an empty system turn)."),
]  # fmt: skip
ChatTemplateOpt = Annotated[
    str | None,
    typer.Option("--chat-template", metavar=PATH, help="--chat with this Jinja template file (a GGUF or a folder "
                 "without one), instead of the checkpoint's own."),
]  # fmt: skip
CHAT = [("chat", ChatOpt, False), ("system", SystemOpt, None), ("no_system", NoSystemOpt, False),
        ("chat_template", ChatTemplateOpt, None)]  # fmt: skip
