"""The options of a run, by the CLI's names, as one checked pipeline Request: the one policy both doors use.

The CLI (`qkv_cli.cli.params.request`) and the Python API (`qkv_cli.api`) both build their Request here, so a
value refused by one is refused by the other with the same one-line message (a `QkvError`).
"""

from __future__ import annotations

from collections.abc import Mapping

from qkv_cli.errors import QkvError

# options that describe the random-weights model or its inputs: a checkpoint fixes them (one policy, every command)
FIXED_BY_CHECKPOINT = {
    "d": "--d", "tau": "--heads", "positions": "--positions", "projection": "--projection", "tokenizer": "--tokenizer",
    "kv_heads": "--kv-heads", "context": "--context", "context_file": "--context-file", "mask_file": "--mask-file",
    "ablate": "--ablate", "causal": "--causal", "window": "--window", "chunk": "--chunk", "scale": "--scale",
    "pad_to": "--pad-to", "n": "--n", "batch": "--batch",
}  # fmt: skip
NEEDS_CHECKPOINT = {"layer": "chooses a layer of", "download": "fetches", "generate": "lets a decoder write with",
                    "predict": "reads the output head of", "logit_lens": "reads the output head of",
                    "chat": "uses the chat template of", "system": "is a message in the chat template of",
                    "no_system": "empties the system message in the chat template of",
                    "chat_template": "replaces the chat template of", "target": "is the decoder's text of",
                    "attention": "picks an attention of", "rows": "keeps query rows of"}  # fmt: skip


def check_checkpoint_policy(values: Mapping, explicit) -> None:
    """With a model, options the checkpoint fixes are errors; without one, --layer, --download ... are.

    values: option name -> value; explicit: the names the user gave (not defaulted)."""
    if values.get("model") is None:
        for name, what in NEEDS_CHECKPOINT.items():
            if name in explicit:
                flag = "--" + name.replace("_", "-")
                raise QkvError(f"{flag} needs --model: it {what} a real checkpoint (see qkv models)")
        return
    clash = [flag for name, flag in FIXED_BY_CHECKPOINT.items() if name in explicit
             and not (name in ("ablate", "ablate_with") and "target" in explicit)  # an encoder-decoder's --ablate
             and not (name == "n" and {"m", "tau", "text"} <= values.keys())]  # fmt: skip
    # (qkv shapes --model --n: the source length of an encoder-decoder; pipeline.shapes refuses it for the others)
    if "--batch" in clash:  # a batch pads random-weights sentences together; a checkpoint's texts are compared
        raise QkvError(
            "--batch runs seeded random weights only: to compare texts on a checkpoint, use qkv compare "
            "A B --model M (qkv heads --file F --model M aggregates one sentence per line)"
        )
    if clash:
        raise QkvError(
            f"{clash[0]} cannot be used with --model: the checkpoint fixes d, the heads, the tokenizer and its mask"
        )


def chat_of(values: Mapping):
    """chat, system, no_system, chat_template as one pipeline.chat.Chat; None when none is given (any of the last
    three implies chat)."""
    if not (values.get("chat") or values.get("no_system")) and values.get("system") is None \
            and values.get("chat_template") is None:  # fmt: skip
        return None
    from qkv_cli.pipeline.chat import Chat

    no_system, template = bool(values.get("no_system")), values.get("chat_template")
    return Chat(system=values.get("system"), no_system=no_system, template_file=template)


def size_of(value, name: str = "max_memory") -> int | None:
    """--max-memory (or another size, by its keyword name) as bytes: None, a whole number of bytes, or a size such
    as '12GB' / '800MiB'."""
    from qkv_cli.core.budget import parse_size

    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise QkvError(f"{name} must be a size such as '12GB' or a number of bytes, got {type(value).__name__}")
    return parse_size(str(value), "--max-memory" if name == "max_memory" else name)


def parse_max_output(value) -> int:
    """--max-output (a size such as '256MB', or bytes) as bytes; its default when None."""
    from qkv_cli.core.output_size import parse_max_output as parse

    return parse(value)


def output_of(fmt: str, show, limit: int, heads=None, checkpoint: bool = True, shown_layers: int = 1):
    """What a run will print (core.output_size.Output): its format, the matrices shown, the limit, the heads (and
    the layers a generation's rows rank in)."""
    from qkv_cli.core.output_size import Output

    return Output(fmt, tuple(show), limit, heads, checkpoint, shown_layers)


def sample_text(name: str | None = None) -> str:
    """A built-in sample (sample_texts/NAME.txt), or with no name the sentence a command runs when given no TEXT."""
    from qkv_cli.text.samples import default_text
    from qkv_cli.text.samples import sample_text as read

    return default_text() if name is None else read(name)


def read_text(text: str | None, file=None, default: str | None = None) -> str:
    """TEXT, or --file's (``-``: standard input; ``sample:NAME``: a sample), or the default: every read bounded."""
    from qkv_cli.text.inputs import get_text

    return get_text(text, file, default)


def read_context(context: str | None, context_file=None, stdin_taken: bool = False) -> str | None:
    """--context or --context-file's text (cross-attention's Y), None when neither is given."""
    from qkv_cli.text.inputs import get_context

    return get_context(context, context_file, stdin_taken)


def request(values: Mapping, text=None, default=None, **extra):
    """The pipeline Request these option values describe (Settings checked at construction).

    values: option name -> value, with the CLI's parameter names (tau for --heads, layer for --layer ...);
    enum values may be given as their str Enum members."""
    from qkv_cli.core.settings import Settings
    from qkv_cli.pipeline.request import Request

    def value(name, fallback=None):
        v = values.get(name, fallback)
        v = fallback if v is None else v
        return getattr(v, "value", v)

    settings = Settings(
        d=value("d", 512), tau=value("tau", 8), seed=value("seed", 0), kernel=value("kernel", "vectorized"),
        causal=value("causal", False), window=value("window"), chunk=value("chunk"), scale=value("scale", "auto"),
        positions=value("positions", "sinusoidal"), projection=value("projection", "random"),
        dtype=value("dtype", "float64"), tokenizer=value("tokenizer", "word"), kv_heads=value("kv_heads"),
        ablate=value("ablate"), ablate_with=value("ablate_with", "zeros"),
    )  # fmt: skip
    fields = dict(
        text=text, file=values.get("file"), default=default, settings=settings, context=values.get("context"),
        context_file=values.get("context_file"), mask_file=values.get("mask_file"), model=values.get("model"),
        layers=tuple(values.get("layer") or ()), download=bool(values.get("download")),
        max_memory=size_of(values.get("max_memory")), generate=values.get("generate") or 0,
        temperature=values.get("temperature") or 0.0, top_k=values.get("top_k") or 0, sample_seed=value("seed", 0),
        chat=chat_of(values), predict=bool(values.get("predict")), logit_lens=bool(values.get("logit_lens")),
        target=values.get("target"), attention=value("attention"), rows=_rows(values.get("rows")),
    )  # fmt: skip
    return Request.of(**(fields | extra))


def _rows(value) -> str | None:
    """--rows as the text of a slice ("A:B", "-128:"); a Python slice is accepted from the API. Checked against the
    text's length by models.model.select_rows, once the text is tokenized."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, slice):
        if value.step not in (None, 1):
            raise QkvError(f"rows={value!r} has a step: give a slice A:B of consecutive query positions")
        parts = ("" if v is None else str(int(v)) for v in (value.start, value.stop))
        return ":".join(parts)
    kind = type(value).__name__
    raise QkvError(f"rows must be a slice such as slice(-128, None) or a string such as '-128:', got {kind}")
