"""What a command asks the pipeline for: one frozen Request, however it was given (CLI, tests, scripts)."""

from __future__ import annotations

from dataclasses import dataclass, field

from qkv_cli.core.settings import Settings

METHODS = ("rollout", "value-norm", "value-zeroing")  # Request.method: here, so that listing them imports no NumPy
FUSIONS = ("mean", "max", "min")  # Request.head_fusion


@dataclass(frozen=True)
class Request:
    text: str | None = None  # TEXT ('-' reads stdin)
    file: str | None = None  # --file PATH ('-' = stdin)
    default: str | None = None  # the text when neither is given (a sample), else that is an error
    settings: Settings = field(default_factory=Settings)  # the random-weights model (dtype and kernel for --model)
    context: str | None = None  # cross-attention: keys and values from this text
    context_file: str | None = None
    mask_file: str | None = None  # a custom grid: True / 1 = may attend
    batch: bool = False  # one sentence per line, padded together
    band: bool = False  # a long text under --window may keep only the band of the weights
    model: str | None = None  # --model: a checkpoint instead of random weights
    layers: tuple[int, ...] = ()  # --layer (0-based, -1 = last)
    rows: str | None = None  # --rows A:B: keep the weights of these query positions only (None: every query)
    heads: tuple[int, ...] | None = None  # --head with --model: the heads whose weights `attentions` keeps (None: all)
    narrow: bool = False  # the views read attention_layers: keep only the --layer ones when every layer's won't fit
    all_layers: bool = False  # without --layer: every layer's detail (JSON) instead of the last one
    download: bool = False
    max_memory: int | None = None  # bytes; None = half the RAM
    generate: int = 0  # a decoder writes this many new tokens (0: no generation)
    temperature: float = 0.0  # 0: greedy
    top_k: int = 0  # 0: every token may be sampled
    sample_seed: int = 0
    progress: object = None  # generation: progress(t, max_new, seconds) after each written token (None: silent)
    chat: object = None  # pipeline.chat.Chat: wrap the text in a chat template (None: the text as it is)
    predict: bool = False  # the next-token predictions at every position
    logit_lens: bool = False  # ... after every layer
    method: str | None = None  # qkv attribute / heatmap --method: one of METHODS (pipeline.attribution)
    head_fusion: str | None = None  # rollout: one of FUSIONS over the heads of a layer (None: mean)
    target: str | None = None  # an encoder-decoder: the decoder reads its start token, then this text
    attention: str | None = None  # an encoder-decoder: encoder, decoder or cross (None: cross)
    induction_probe: int = 0  # qkv heads: N seeded random tokens repeated twice instead of the text (0: the text)
    output: object = None  # core.output_size.Output: the JSON or CSV to print, refused above its limit (None: none)

    @property
    def from_stdin(self) -> bool:
        return self.text == "-" or self.file == "-"
