"""A checkpoint's config.json as a frozen ModelConfig, and its parameter table (pure Python: no numpy import).

Notation: L layers, tau heads, d model width, d_k = d / tau, d_ff feed-forward width, V vocabulary size,
P position limit (max_position_embeddings / n_positions).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from qkv_cli.errors import QkvError

FAMILIES = ("bert", "gpt2")
ACTIVATIONS = ("gelu", "gelu_new", "gelu_pytorch_tanh", "relu")

# config.json keys per family: our field -> (key, default or REQUIRED)
REQUIRED = object()
KEYS = {
    "bert": {
        "n_layers": ("num_hidden_layers", REQUIRED),
        "n_heads": ("num_attention_heads", REQUIRED),
        "d": ("hidden_size", REQUIRED),
        "d_ff": ("intermediate_size", REQUIRED),
        "vocab_size": ("vocab_size", REQUIRED),
        "max_positions": ("max_position_embeddings", REQUIRED),
        "type_vocab_size": ("type_vocab_size", 2),
        "layer_norm_eps": ("layer_norm_eps", 1e-12),
        "activation": ("hidden_act", "gelu"),
    },
    "gpt2": {
        "n_layers": ("n_layer", REQUIRED),
        "n_heads": ("n_head", REQUIRED),
        "d": ("n_embd", REQUIRED),
        "d_ff": ("n_inner", None),  # None means 4 d
        "vocab_size": ("vocab_size", REQUIRED),
        "max_positions": ("n_positions", REQUIRED),
        "layer_norm_eps": ("layer_norm_epsilon", 1e-5),
        "activation": ("activation_function", "gelu_new"),
        "scale_attn_weights": ("scale_attn_weights", True),
        "scale_by_layer": ("scale_attn_by_inverse_layer_idx", False),
    },
}


@dataclass(frozen=True)
class ModelConfig:
    """What the forward pass needs from config.json; checks its invariants at construction."""

    family: str  # "bert" or "gpt2"
    n_layers: int  # L
    n_heads: int  # tau
    d: int  # model width
    d_ff: int  # feed-forward width
    vocab_size: int  # V
    max_positions: int  # P: the longest input the position table allows
    layer_norm_eps: float
    activation: str  # gelu (exact erf), gelu_new / gelu_pytorch_tanh (tanh), relu
    type_vocab_size: int = 0  # bert: token-type (segment) embeddings
    scale_attn_weights: bool = True  # gpt2: divide scores by sqrt(d_k)
    scale_by_layer: bool = False  # gpt2: also divide by (layer index + 1)
    name: str = ""

    def __post_init__(self) -> None:
        if self.family not in FAMILIES:
            raise QkvError(f"unsupported model_type {self.family!r}: supported are {', '.join(FAMILIES)}")
        for field in ("n_layers", "n_heads", "d", "d_ff", "vocab_size", "max_positions"):
            value = getattr(self, field)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise QkvError(f"{self._where()}: {field} must be a positive integer, got {value!r}")
        if self.d % self.n_heads:
            raise QkvError(f"{self._where()}: d ({self.d}) must be divisible by the number of heads ({self.n_heads})")
        if self.activation not in ACTIVATIONS:
            raise QkvError(
                f"{self._where()}: activation {self.activation!r} is not supported: use one of {', '.join(ACTIVATIONS)}"
            )
        eps = self.layer_norm_eps
        if not isinstance(eps, int | float) or isinstance(eps, bool) or not (math.isfinite(eps) and eps >= 0):
            raise QkvError(f"{self._where()}: layer_norm_eps must be a finite number >= 0, got {eps!r}")

    @property
    def d_k(self) -> int:
        return self.d // self.n_heads

    def _where(self) -> str:
        return f"config of {self.name}" if self.name else "model config"


def config_from_dict(raw: dict, name: str = "") -> ModelConfig:
    """Map a Hugging Face config.json dict onto ModelConfig; QkvError names a missing or bad key."""
    where = f"config.json of {name}" if name else "config.json"
    if not isinstance(raw, dict):
        raise QkvError(f"{where} must hold a JSON object, got {type(raw).__name__}")
    family = raw.get("model_type")
    if family is None:
        raise QkvError(f"{where} has no 'model_type': supported are {', '.join(FAMILIES)}")
    if family not in KEYS:
        raise QkvError(f"{where}: model_type {family!r} is not supported: supported are {', '.join(FAMILIES)}")
    values = {}
    for field, (key, default) in KEYS[family].items():
        if key in raw and raw[key] is not None:
            values[field] = raw[key]
        elif default is REQUIRED:
            raise QkvError(f"{where} is missing the key '{key}' (needed for a {family} model)")
        else:
            values[field] = default
    if family == "gpt2" and values["d_ff"] is None:
        values["d_ff"] = 4 * values["d"] if isinstance(values["d"], int) else values["d"]
    if family == "bert" and raw.get("position_embedding_type", "absolute") != "absolute":
        raise QkvError(f"{where}: position_embedding_type {raw['position_embedding_type']!r} is not supported")
    for field, (key, _) in KEYS[family].items():
        if field in ("activation",):
            if not isinstance(values[field], str):
                raise QkvError(f"{where}: '{key}' must be a string, got {values[field]!r}")
        elif field in ("scale_attn_weights", "scale_by_layer"):
            if not isinstance(values[field], bool):
                raise QkvError(f"{where}: '{key}' must be true or false, got {values[field]!r}")
        elif field != "layer_norm_eps" and (not isinstance(values[field], int) or isinstance(values[field], bool)):
            raise QkvError(f"{where}: '{key}' must be an integer, got {values[field]!r}")
    return ModelConfig(family=family, name=name, **values)


def read_config(folder: str | Path, name: str = "") -> ModelConfig:
    """ModelConfig from folder/config.json; QkvError if it is missing, not JSON, or lacks a key."""
    path = Path(folder) / "config.json"
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise QkvError(
            f"no config.json in '{folder}': a model folder needs config.json, model.safetensors and tokenizer.json"
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise QkvError(f"cannot read '{path}': {exc}") from None
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise QkvError(f"'{path}' is not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None
    return config_from_dict(raw, name or Path(folder).name)


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


def parameter_table(config: ModelConfig) -> list[Param]:
    """Every learned matrix the forward pass uses, with its real shape and count; sum(p.params) is the total.

    Per-head projections are listed per head (d x d_k, count L * tau) as in the notation table; they are the
    column blocks of the checkpoint's d x d matrices. The BERT pooler is not used and not listed.
    """
    L, tau, d, dk, dff = config.n_layers, config.n_heads, config.d, config.d_k, config.d_ff
    if config.family == "bert":
        emb = [
            Param("word_embeddings", "E", (config.vocab_size, d), 1, "token vectors (one row per vocabulary id)"),
            Param("position_embeddings", "P", (config.max_positions, d), 1, "learned position vectors"),
            Param("token_type_embeddings", "T", (config.type_vocab_size, d), 1, "segment vectors (sentence A/B)"),
            Param("embeddings_ln_gamma", "gamma", (d,), 1, "embedding LayerNorm scale"),
            Param("embeddings_ln_beta", "beta", (d,), 1, "embedding LayerNorm shift"),
        ]
        final: list[Param] = []
        ln1, ln2 = "LayerNorm after attention (post-LN)", "LayerNorm after the feed-forward (post-LN)"
    else:
        emb = [
            Param("wte", "E", (config.vocab_size, d), 1, "token vectors (one row per vocabulary id)"),
            Param("wpe", "P", (config.max_positions, d), 1, "learned position vectors"),
        ]
        final = [
            Param("ln_f_gamma", "gamma", (d,), 1, "final LayerNorm scale"),
            Param("ln_f_beta", "beta", (d,), 1, "final LayerNorm shift"),
        ]
        ln1, ln2 = "LayerNorm before attention (pre-LN)", "LayerNorm before the feed-forward (pre-LN)"
    layer = [
        Param("W_q", "W_j^q", (d, dk), L * tau, "query projection of head j"),
        Param("b_q", "b_j^q", (dk,), L * tau, "query bias of head j"),
        Param("W_k", "W_j^k", (d, dk), L * tau, "key projection of head j"),
        Param("b_k", "b_j^k", (dk,), L * tau, "key bias of head j"),
        Param("W_v", "W_j^v", (d, dk), L * tau, "value projection of head j"),
        Param("b_v", "b_j^v", (dk,), L * tau, "value bias of head j"),
        Param("W_o", "W^o", (d, d), L, "output projection of the concatenated heads"),
        Param("b_o", "b^o", (d,), L, "output bias"),
        Param("ln1_gamma", "gamma_1", (d,), L, ln1 + ", scale"),
        Param("ln1_beta", "beta_1", (d,), L, ln1 + ", shift"),
        Param("W_1", "W_1", (d, dff), L, "feed-forward expansion"),
        Param("b_1", "b_1", (dff,), L, "feed-forward expansion bias"),
        Param("W_2", "W_2", (dff, d), L, "feed-forward projection back to d"),
        Param("b_2", "b_2", (d,), L, "feed-forward output bias"),
        Param("ln2_gamma", "gamma_2", (d,), L, ln2 + ", scale"),
        Param("ln2_beta", "beta_2", (d,), L, ln2 + ", shift"),
    ]
    return emb + layer + final


def parameter_count(config: ModelConfig) -> int:
    return sum(p.params for p in parameter_table(config))
