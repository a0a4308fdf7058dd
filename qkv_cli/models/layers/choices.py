"""A RoPE decoder's options, one frozen dataclass per concern, built by decoder_config.read and checked here.

    Attention   scale, biases of W^q, W^k, W^v and W^o, QK-norm, layer types and window or chunk, soft-capping,
                the NoPE layers' query temperature
    Positions   the RoPE of each layer type, and the layers without RoPE (NoPE)
    Mlp         gated or not, biases, parallel residual, a mixture of experts (models.layers.moe.Moe)
    Norms       RMSNorm (offset 1 for Gemma) or LayerNorm, and where the norms sit (the layout)
    Embeddings  tensor naming, the embedding scale, a tied output head, the final soft-cap

A misspelt option is an AttributeError at the line that reads it, never a silent None; a bad value is a QkvError
at construction (the config reader adds where it came from).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from qkv_cli.errors import QkvError
from qkv_cli.models.layers.moe import Moe
from qkv_cli.models.layers.rope import Rope

SLIDING, FULL, CHUNKED = "sliding_attention", "full_attention", "chunked_attention"
QK_NORMS = (None, "head", "flat")  # per head over d_k (Qwen 3, Gemma 3), or the whole projection (OLMo 2)
NORM_KINDS = ("rms", "rms1p", "layer")
LAYOUTS = ("llama", "gemma", "olmo2", "neox")  # decoder_names.NORMS has each
NAMINGS = ("llama", "neox", "phi3", "llama4")  # phi3: fused qkv_proj and gate_up_proj; llama4: feed_forward


def _positive(name: str, value, none_ok: bool = True) -> None:
    if value is None and none_ok:
        return
    if isinstance(value, bool) or not isinstance(value, int | float) or not (math.isfinite(value) and value > 0):
        raise QkvError(f"{name} must be a positive number, got {value!r}")


def _choice(name: str, value, choices) -> None:
    if value not in choices:
        raise QkvError(f"{name} {value!r} is not supported: use one of {', '.join(map(str, choices))}")


@dataclass(frozen=True)
class Attention:
    scale: float  # multiplies Q K^T (1/sqrt(d_k), or the family's own)
    qkv_bias: bool = False
    o_bias: bool = False
    qk_norm: str | None = None  # QK_NORMS
    layer_types: tuple[str, ...] = ()  # one per layer: SLIDING or FULL
    sliding_window: int | None = None  # n_c on sliding layers
    softcap: float | None = None  # tanh(S / c) c before the mask (Gemma 2)
    sinks: bool = False  # a learned sink logit per head: one more softmax column, dropped (gpt-oss)
    chunk_size: int | None = None  # n_ch on chunked layers (Llama 4): query i sees its own chunk's keys only
    l2_qk_norm: bool = False  # Q, K / sqrt(mean(x^2) + eps) after RoPE, no weight, on RoPE layers (Llama 4)
    temperature: tuple[float, float] | None = None  # (floor_scale, attn_scale): a NoPE layer's query at position p
    # times log(floor((p + 1) / floor_scale) + 1) attn_scale + 1 (Llama 4)

    def __post_init__(self):
        _positive("the attention scale", self.scale, none_ok=False)
        if not isinstance(self.sinks, bool):
            raise QkvError(f"sinks must be true or false, got {self.sinks!r}")
        _choice("QK-norm", self.qk_norm, QK_NORMS)
        for name in ("qkv_bias", "o_bias"):
            if not isinstance(getattr(self, name), bool):
                raise QkvError(f"{name} must be true or false, got {getattr(self, name)!r}")
        if any(t not in (SLIDING, FULL, CHUNKED) for t in self.layer_types):
            raise QkvError(f"layer types must be {SLIDING!r}, {FULL!r} or {CHUNKED!r}, got {self.layer_types!r}")
        n = self.chunk_size
        if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
            raise QkvError(f"'attention_chunk_size' must be at least 1, got {n!r}")
        if self.temperature is not None:
            _positive("'floor_scale'", self.temperature[0], none_ok=False)
            a = self.temperature[1]
            if isinstance(a, bool) or not isinstance(a, int | float) or not math.isfinite(a):
                raise QkvError(f"'attn_scale' must be a finite number, got {a!r}")
        w = self.sliding_window
        if w is not None and (isinstance(w, bool) or not isinstance(w, int) or w < 1):
            raise QkvError(f"'sliding_window' must be at least 1, got {w!r}")
        _positive("'attn_logit_softcapping'", self.softcap)


@dataclass(frozen=True)
class Positions:
    ropes: dict = field(default_factory=dict)  # layer type or "" (every layer) -> Rope
    no_rope: tuple[int, ...] = ()  # layers that use no RoPE at all (SmolLM3's NoPE layers), 0-based

    def __post_init__(self):
        if "" not in self.ropes or not all(isinstance(r, Rope) for r in self.ropes.values()):
            raise QkvError("a RoPE decoder needs a RoPE for every layer (the key '')")
        if any(isinstance(l, bool) or not isinstance(l, int) or l < 0 for l in self.no_rope):
            raise QkvError(f"NoPE layers must be layer indices, got {self.no_rope!r}")

    def of(self, layer_type: str, layer: int) -> Rope | None:
        """The RoPE of a layer (None: a NoPE layer); Gemma 3's sliding layers have a base of their own."""
        if layer in self.no_rope:
            return None
        return self.ropes.get(layer_type, self.ropes[""])


@dataclass(frozen=True)
class Mlp:
    gated: bool = True  # W_down (act(W_gate x) * W_up x); else W_2 act(W_1 x + b_1) + b_2 (GPT-NeoX)
    bias: bool = False
    parallel_residual: bool = False  # GPT-NeoX: x' = MLP(N_2(x)) + Att(N_1(x)) + x
    moe: Moe | None = None  # a mixture of experts (Mixtral ...): its router and experts; None: dense
    swiglu: tuple[float, float] | None = None  # gpt-oss's clamped SwiGLU: (alpha, limit), swiglu_alpha / _limit

    def __post_init__(self):
        for name in ("gated", "bias", "parallel_residual"):
            if not isinstance(getattr(self, name), bool):
                raise QkvError(f"the MLP's {name} must be true or false, got {getattr(self, name)!r}")
        if self.swiglu is not None:
            _positive("'swiglu_alpha'", self.swiglu[0], none_ok=False)
            _positive("'swiglu_limit'", self.swiglu[1], none_ok=False)
        if self.moe is not None and not isinstance(self.moe, Moe):
            raise QkvError(f"the MLP's experts must be a Moe, got {self.moe!r}")


@dataclass(frozen=True)
class Norms:
    kind: str = "rms"  # NORM_KINDS: "rms1p" is Gemma's x_norm (1 + w)
    layout: str = "llama"  # LAYOUTS: where the norms sit in a block

    def __post_init__(self):
        _choice("norm kind", self.kind, NORM_KINDS)
        _choice("norm layout", self.layout, LAYOUTS)

    @property
    def offset(self) -> float:
        return 1.0 if self.kind == "rms1p" else 0.0

    @property
    def biased(self) -> bool:  # LayerNorm has a shift
        return self.kind == "layer"


@dataclass(frozen=True)
class Embeddings:
    names: str = "llama"  # NAMINGS: Hugging Face's tensor names (GPT-NeoX and Phi-3 have their own)
    scale: float | None = None  # E[ids] * scale (Gemma: sqrt(d))
    tied: bool = False  # the output head is E
    final_softcap: float | None = None  # tanh(z / c) c on the logits (Gemma 2)

    def __post_init__(self):
        _choice("tensor naming", self.names, NAMINGS)
        _positive("the embedding scale", self.scale)
        _positive("'final_logit_softcapping'", self.final_softcap)
        if not isinstance(self.tied, bool):
            raise QkvError(f"'tie_word_embeddings' must be true or false, got {self.tied!r}")
