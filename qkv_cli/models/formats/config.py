"""A checkpoint's config.json as a frozen ModelConfig (pure Python: no numpy import).

Notation: L layers, tau query heads, G key/value heads, d model width, d_k head width, d_ff feed-forward width,
V vocabulary size, P position limit. Each family reads its own keys (its module's ``read_config``) through
``Keys``, which names the missing or mistyped key in its error.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from qkv_cli.errors import QkvError

if TYPE_CHECKING:  # models.layers.choices imports NumPy (through RoPE); a config needs its types only
    from qkv_cli.models.families.encdec.config import EncDecOptions
    from qkv_cli.models.layers.choices import Attention, Embeddings, Mlp, Norms, Positions
    from qkv_cli.models.layers.mla import Latent

REQUIRED = object()
MAX_LAYERS = 4096  # declared sizes beyond these are refused before anything is allocated for them
MAX_WIDTH = 1 << 20
MAX_VOCAB = 1 << 24
MAX_CONFIG_BYTES = 16 * 2**20
# what a GGUF file says that config.json has no key for (llama.cpp's rope_freqs, a bias on W^o alone): gguf_map
# writes it, the config.json reader drops it, so a Hugging Face folder is read as transformers reads it
GGUF_ONLY = "qkv_gguf_only"
ACTIVATIONS = ("gelu", "gelu_new", "gelu_pytorch_tanh", "gelu_fast", "relu", "silu")  # models.layers.basic has each


def check_limits(where: str, sizes) -> None:
    """Each (name, value, limit) of `sizes`: at least 1 and at most limit (declared sizes beyond any real model are
    refused before anything is made for them), else a one-line QkvError."""
    for name, value, limit in sizes:
        if value < 1:
            raise QkvError(f"{where}: {name} must be at least 1, got {value}")
        if value > limit:
            raise QkvError(f"{where}: {name} = {value} is beyond any real model (at most {limit})")


@dataclass(frozen=True)
class ModelConfig:
    """What the forward pass needs from config.json; checks its invariants at construction."""

    family: str  # the model_type
    n_layers: int  # L
    n_heads: int  # tau
    d: int  # model width
    d_ff: int  # feed-forward width
    vocab_size: int  # V
    max_positions: int  # P: the longest input the model accepts
    norm_eps: float
    activation: str
    n_kv_heads: int = 0  # G key/value heads (0: as many as query heads)
    head_dim: int = 0  # d_k (0: d / tau)
    positions_key: str = "max_position_embeddings"  # the config key behind max_positions, for messages
    type_vocab_size: int = 0  # bert: token-type (segment) embeddings
    scale_attn_weights: bool = True  # gpt2: divide scores by sqrt(d_k)
    scale_by_layer: bool = False  # gpt2: also divide by (layer index + 1)
    # a RoPE decoder's options, one per concern (models.layers.choices; None for BERT and GPT-2)
    attention: Attention | None = None
    rope: Positions | None = None
    mlp: Mlp | None = None
    norms: Norms | None = None
    embeddings: Embeddings | None = None
    latent: Latent | None = None  # multi-head latent attention's widths (DeepSeek-V3: models.layers.mla)
    encdec: EncDecOptions | None = None  # an encoder-decoder's decoder sizes and family options (T5, BART ...)
    eos: tuple[int, ...] = ()  # end-of-sequence token ids (generate stops there)
    name: str = ""

    def __post_init__(self) -> None:
        for name in ("n_layers", "n_heads", "d", "d_ff", "vocab_size", "max_positions"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise QkvError(f"{self._where()}: {name} must be a positive integer, got {value!r}")
        check_limits(self._where(), ((name, getattr(self, name), limit) for name, limit in (
            ("n_layers", MAX_LAYERS), ("n_heads", MAX_WIDTH), ("d", MAX_WIDTH), ("d_ff", 8 * MAX_WIDTH),
            ("vocab_size", MAX_VOCAB))))  # fmt: skip
        if not self.n_kv_heads:
            object.__setattr__(self, "n_kv_heads", self.n_heads)
        if not self.head_dim:
            if self.d % self.n_heads:
                raise QkvError(
                    f"{self._where()}: d ({self.d}) must be divisible by the number of heads ({self.n_heads})"
                )
            object.__setattr__(self, "head_dim", self.d // self.n_heads)
        for name in ("n_kv_heads", "head_dim"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= MAX_WIDTH:
                raise QkvError(f"{self._where()}: {name} must be a positive integer, got {value!r}")
        if self.n_heads % self.n_kv_heads:
            raise QkvError(
                f"{self._where()}: the {self.n_heads} query heads must be divisible by the {self.n_kv_heads} "
                "key/value heads (num_key_value_heads)"
            )
        if self.activation not in ACTIVATIONS:
            raise QkvError(
                f"{self._where()}: activation {self.activation!r} is not supported: use one of {', '.join(ACTIVATIONS)}"
            )
        eps = self.norm_eps
        if not isinstance(eps, int | float) or isinstance(eps, bool) or not (math.isfinite(eps) and eps >= 0):
            raise QkvError(f"{self._where()}: the norm epsilon must be a finite number >= 0, got {eps!r}")

    @property
    def d_k(self) -> int:
        return self.head_dim

    @property
    def G(self) -> int:
        return self.n_kv_heads

    def _where(self) -> str:
        return f"config of {self.name}" if self.name else "model config"


class Keys:
    """Typed reads of config.json keys for one family; a missing or mistyped key is a one-line QkvError."""

    def __init__(self, raw: dict, where: str, family: str):
        self.raw, self.where, self.family = raw, where, family

    @contextlib.contextmanager
    def located(self):
        """Inside the block, a QkvError (an options class refusing a value) names the file it came from."""
        try:
            yield
        except QkvError as exc:
            message = str(exc)
            raise QkvError(message if message.startswith(self.where) else f"{self.where}: {message}") from None

    def get(self, key: str, default=REQUIRED):
        if key in self.raw and self.raw[key] is not None:
            return self.raw[key]
        if default is REQUIRED:
            raise QkvError(f"{self.where} is missing the key '{key}' (needed for a {self.family} model)")
        return default

    def int(self, key: str, default=REQUIRED):
        value = self.get(key, default)
        if value is not default and (not isinstance(value, int) or isinstance(value, bool)):
            raise QkvError(f"{self.where}: '{key}' must be an integer, got {value!r}")
        if value is not default and abs(value) > 2**53:  # no size or count is this large; beyond it floats round
            raise QkvError(f"{self.where}: '{key}' is too large ({len(str(abs(value)))} digits)")
        return value

    def number(self, key: str, default=REQUIRED):
        value = self.get(key, default)
        if value is not default and (not isinstance(value, int | float) or isinstance(value, bool)):
            raise QkvError(f"{self.where}: '{key}' must be a number, got {value!r}")
        if value is not default and not (abs(value) < 2**1023 and math.isfinite(value)):  # ints beyond float's range
            shown = value if isinstance(value, float) else f"an integer of {len(str(abs(value)))} digits"
            raise QkvError(f"{self.where}: '{key}' must be finite, got {shown}")
        return value

    def bool(self, key: str, default=REQUIRED):
        value = self.get(key, default)
        if not isinstance(value, bool):
            raise QkvError(f"{self.where}: '{key}' must be true or false, got {value!r}")
        return value

    def str(self, key: str, default=REQUIRED):
        value = self.get(key, default)
        if value is not None and not isinstance(value, str):
            raise QkvError(f"{self.where}: '{key}' must be a string, got {value!r}")
        return value


def token_ids(value) -> tuple[int, ...]:
    """eos_token_id as an int, a list of ints or null -> a tuple (anything else: empty)."""
    values = value if isinstance(value, list) else [value]
    return tuple(v for v in values if isinstance(v, int) and not isinstance(v, bool) and v >= 0)


@dataclass(frozen=True)
class Param:
    """One learned matrix or vector of the checkpoint: `count` copies of `shape` (per head, per layer)."""

    name: str  # e.g. "W_q"
    notation: str  # as in the book, e.g. "W_j^q"
    shape: tuple[int, ...]
    count: int  # how many copies in the whole model (L * tau for a per-head matrix)
    meaning: str

    @property
    def params(self) -> int:  # all copies
        return self.count * math.prod(self.shape)


def attention_params(c: ModelConfig, biases: bool = True, output_bias: bool = True) -> list[Param]:
    """The attention sub-layer's matrices per head (d x d_k, count L * tau or L * G), as the notation lists them."""
    L, tau, G, d, dk = c.n_layers, c.n_heads, c.n_kv_heads, c.d, c.d_k
    out = []
    for letter, heads, what in (("q", tau, "query"), ("k", G, "key"), ("v", G, "value")):
        out.append(Param(f"W_{letter}", f"W_j^{letter}", (d, dk), L * heads, f"{what} projection of head j"))
        if biases:
            out.append(Param(f"b_{letter}", f"b_j^{letter}", (dk,), L * heads, f"{what} bias of head j"))
    out.append(Param("W_o", "W^o", (tau * dk, d), L, "output projection of the concatenated heads"))
    if output_bias:
        out.append(Param("b_o", "b^o", (d,), L, "output bias"))
    return out


def layer_norm_mlp_params(c: ModelConfig, ln1: str, ln2: str) -> list[Param]:
    """BERT's and GPT-2's per-layer LayerNorms (ln1, ln2: where each sits) and two-matrix feed-forward."""
    L, d, dff = c.n_layers, c.d, c.d_ff
    return [
        Param("ln1_gamma", "gamma_1", (d,), L, ln1 + ", scale"),
        Param("ln1_beta", "beta_1", (d,), L, ln1 + ", shift"),
        Param("W_1", "W_1", (d, dff), L, "feed-forward expansion"),
        Param("b_1", "b_1", (dff,), L, "feed-forward expansion bias"),
        Param("W_2", "W_2", (dff, d), L, "feed-forward projection back to d"),
        Param("b_2", "b_2", (d,), L, "feed-forward output bias"),
        Param("ln2_gamma", "gamma_2", (d,), L, ln2 + ", scale"),
        Param("ln2_beta", "beta_2", (d,), L, ln2 + ", shift"),
    ]
