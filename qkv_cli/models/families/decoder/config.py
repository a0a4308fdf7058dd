"""Reading a RoPE decoder's config.json, as transformers v5 writes it (`rope_parameters`, `layer_types`) and as
older files do (`rope_theta`, `rope_scaling`, `rotary_pct`, `sliding_window_pattern`, `rope_local_base_freq`).

A family module calls `read(keys, SPEC)` with the Spec that makes it what it is; the result is the ModelConfig
fields, the family's choices as the typed options of models.layers.choices (attention, rope, mlp, norms, embeddings).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from qkv_cli.errors import QkvError
from qkv_cli.models.families.decoder import moe as moe_config
from qkv_cli.models.formats.config import GGUF_ONLY, MAX_LAYERS, MAX_WIDTH, check_limits
from qkv_cli.models.layers.choices import CHUNKED, FULL, SLIDING, Attention, Embeddings, Mlp, Norms, Positions
from qkv_cli.models.layers.rope import Rope

SLIDING_RULES = (None, "all", "qwen", "alternate", "pattern", "nope", "switch", "chunk")


@dataclass(frozen=True)
class Spec:
    """How a family reads its config.json (each family module holds one as SPEC).

    bias: (config key, default) for the biases of W^q, W^k, W^v and W^o, or (q, k, v bias, o bias) fixed by the
    family (Qwen 2); mlp_bias: a key and default, or a fixed bool. sliding: how layers become sliding when
    config.json has no `layer_types`: None, "all" (Mistral), "qwen", "alternate" (Gemma 2), "pattern" (Gemma 3),
    "switch" (Qwen3-MoE: every layer iff use_sliding_window and sliding_window),
    "chunk" (Llama 4: the RoPE layers are chunked when `attention_chunk_size` is set).
    act: the activation's keys in order, then its default. partial, theta, local_theta: (key, default).
    grouped: False for a family without grouped-query attention (GPT-NeoX: G = tau whatever
    `num_key_value_heads` says, as transformers reads it)."""

    layout: str = "llama"
    names: str = "llama"
    norm: str = "rms"
    act: tuple = ("hidden_act", "silu")
    eps: str = "rms_norm_eps"
    bias: tuple = ("attention_bias", False)
    mlp_bias: tuple | bool = ("mlp_bias", False)
    qk_norm: str | None = None
    softcap: bool = False
    embed_scale: bool = False
    tie: bool = False
    sliding: str | None = None
    parallel_residual: bool = False
    scale_key: str | None = None
    partial: tuple = (None, 1.0)
    theta: tuple = ("rope_theta", 10000.0)
    local_theta: tuple | None = None
    grouped: bool = True
    nope: bool = False  # SmolLM3: `no_rope_layers` / `no_rope_layer_interval` name layers without RoPE
    rope_kinds: tuple | None = None  # the RoPE types the family accepts (None: every kind of rope.KINDS)
    rope_aliases: tuple = ()  # (old name, kind) pairs: Phi-3's "su" and "yarn" are LongRoPE
    moe: moe_config.MoeKeys | None = None  # a mixture-of-experts MLP and how its keys are named (Mixtral ...)

    def __post_init__(self):
        if self.sliding not in SLIDING_RULES:
            raise QkvError(f"sliding rule {self.sliding!r} is not one of {SLIDING_RULES}")
        Norms(self.norm, self.layout)  # checks both
        Embeddings(self.names)


def read(keys, spec: Spec = Spec()) -> dict:  # noqa: B008  (a frozen default)
    """The ModelConfig fields of a decoder whose family reads its config.json as `spec` says."""
    with keys.located():
        return _read(keys, spec)


def _read(keys, spec: Spec) -> dict:
    n_layers, tau, d = keys.int("num_hidden_layers"), keys.int("num_attention_heads"), keys.int("hidden_size")
    # before anything is made per layer or per head
    check_limits(keys.where, (("num_hidden_layers", n_layers, MAX_LAYERS), ("num_attention_heads", tau, MAX_WIDTH),
                              ("hidden_size", d, MAX_WIDTH)))  # fmt: skip
    head_dim = keys.int("head_dim", d // tau if d % tau == 0 else 0)
    if head_dim < 1:
        raise QkvError(f"{keys.where}: head_dim must be given when hidden_size ({d}) is not a multiple of the heads")
    nope = no_rope(keys, n_layers, spec.nope)
    types = layer_types(keys, n_layers, spec.sliding, nope)
    window = keys.int("sliding_window", None) if any(t == SLIDING for t in types) else None
    if window is not None and window < 1:
        raise QkvError(f"{keys.where}: 'sliding_window' must be at least 1, got {window}")
    chunk = keys.int("attention_chunk_size", None) if CHUNKED in types else None
    if CHUNKED in types and (chunk is None or chunk < 1):
        raise QkvError(f"{keys.where}: chunked layers need an 'attention_chunk_size' of at least 1, got {chunk}")
    if keys.get("use_bidirectional_attention", False):
        raise QkvError(f"{keys.where}: use_bidirectional_attention is not supported (qkv runs these models causally)")
    scale = keys.number(spec.scale_key, head_dim) if spec.scale_key else head_dim
    if scale <= 0:
        raise QkvError(f"{keys.where}: '{spec.scale_key}' must be positive, got {scale}")
    bias = spec.bias
    qkv_bias, o_bias = (keys.bool(*bias),) * 2 if isinstance(bias[0], str) else bias
    gguf = keys.get(GGUF_ONLY, {})  # a GGUF file's own (config.GGUF_ONLY): W^o's bias apart, rope_freqs
    o_bias = gguf.get("o_bias", o_bias)
    softcap = keys.number("attn_logit_softcapping", None) if spec.softcap else None
    final_softcap = keys.number("final_logit_softcapping", None) if spec.softcap else None
    for key, value in (("attn_logit_softcapping", softcap), ("final_logit_softcapping", final_softcap)):
        if value is not None and value <= 0:
            raise QkvError(f"{keys.where}: '{key}' must be positive, got {value}")
    context = keys.int("max_position_embeddings")
    found = ropes(keys, head_dim, spec.partial, spec.theta, spec.local_theta, context, gguf.get("freq_factors"),
                  dict(spec.rope_aliases))  # fmt: skip
    if spec.rope_kinds and any(r.kind not in spec.rope_kinds for r in found.values()):
        bad = next(r.kind for r in found.values() if r.kind not in spec.rope_kinds)
        raise QkvError(f"{keys.where}: RoPE type {bad!r} is not one this family uses: {', '.join(spec.rope_kinds)}")
    if found[""].kind == "dynamic":  # dynamic RoPE stretches its base beyond the trained context
        context = int(context * found[""].factor)
    mlp_bias = keys.bool(*spec.mlp_bias) if isinstance(spec.mlp_bias, tuple) else spec.mlp_bias
    parallel = keys.bool("use_parallel_residual", True) if spec.parallel_residual else False
    moe = moe_config.read(keys, n_layers, spec.moe) if spec.moe else None  # before any tensor is read
    return {
        "n_layers": n_layers,
        "n_heads": tau,
        "n_kv_heads": kv_heads(keys, tau) if spec.grouped else tau,
        "d": d,
        "d_ff": keys.int("intermediate_size"),
        "vocab_size": keys.int("vocab_size"),
        "max_positions": context,
        "norm_eps": keys.number(spec.eps, 1e-6),
        "activation": activation(keys, spec.act),
        "head_dim": head_dim,
        "attention": Attention(
            float(scale) ** -0.5, qkv_bias, o_bias, spec.qk_norm, types, window, softcap, chunk_size=chunk
        ),
        "rope": Positions(found, nope),
        "mlp": Mlp(spec.names != "neox", mlp_bias, parallel, moe),
        "norms": Norms(spec.norm, spec.layout),
        "embeddings": Embeddings(
            spec.names,
            math.sqrt(d) if spec.embed_scale else None,
            keys.bool("tie_word_embeddings", spec.tie),
            final_softcap,
        ),  # fmt: skip
    }


def no_rope(keys, n_layers: int, nope: bool) -> tuple[int, ...]:
    """SmolLM3's NoPE layers: `no_rope_layers` lists 1 (RoPE) or 0 (no RoPE) per layer; without it, every
    `no_rope_layer_interval`-th layer (the 4th, 8th ...) has none, as transformers' SmolLM3Config makes the list."""
    if not nope:
        return ()
    given = keys.get("no_rope_layers", None)
    if given is None:
        every = keys.int("no_rope_layer_interval", 4)
        if every < 1:
            raise QkvError(f"{keys.where}: 'no_rope_layer_interval' must be at least 1, got {every}")
        given = [int((i + 1) % every != 0) for i in range(n_layers)]
    if not isinstance(given, list) or any(v not in (0, 1) or isinstance(v, bool) for v in given):
        raise QkvError(f"{keys.where}: 'no_rope_layers' must list 1 (RoPE) or 0 (no RoPE) for each layer")
    if len(given) != n_layers:
        raise QkvError(f"{keys.where}: 'no_rope_layers' lists {len(given)} layers but the model has {n_layers}")
    return tuple(i for i, v in enumerate(given) if v == 0)


def activation(keys, act: tuple) -> str:
    """The first of the keys act[:-1] that config.json has (Gemma: hidden_activation, then hidden_act), else act[-1]."""
    for key in act[:-1]:
        value = keys.str(key, None)
        if value is not None:
            return value
    return act[-1]


def layer_types(keys, n_layers: int, sliding, nope=()) -> tuple[str, ...]:
    given = keys.get("layer_types", None)
    if sliding == "nope" and not (keys.get("use_sliding_window", False) is True and keys.get("sliding_window", None)):
        return tuple(FULL for _ in range(n_layers))  # SmolLM3: windows only with use_sliding_window
    kinds = (CHUNKED, FULL) if sliding == "chunk" else (SLIDING, FULL)
    if given is not None:
        if not isinstance(given, list) or len(given) != n_layers or any(t not in kinds for t in given):
            raise QkvError(f"{keys.where}: 'layer_types' must list {kinds[0]!r} or {FULL!r} for each of {n_layers} "
                           "layers")  # fmt: skip
        return tuple(given) if sliding else tuple(FULL for _ in given)
    if sliding == "chunk":  # Llama 4: the RoPE layers are chunked
        on = keys.get("attention_chunk_size", None) is not None
        return tuple(CHUNKED if on and i not in nope else FULL for i in range(n_layers))
    if sliding == "nope":  # SmolLM3: the NoPE layers slide
        return tuple(SLIDING if i in nope else FULL for i in range(n_layers))
    if sliding == "switch":  # Qwen3-MoE: use_sliding_window turns the window on for every layer
        on = keys.get("use_sliding_window", False) is True and keys.get("sliding_window", None) is not None
        return tuple(SLIDING if on else FULL for _ in range(n_layers))
    if sliding == "all":
        return tuple(SLIDING if keys.get("sliding_window", None) is not None else FULL for _ in range(n_layers))
    if sliding == "qwen":
        on = keys.get("use_sliding_window", False) is True and keys.get("sliding_window", None) is not None
        first = keys.int("max_window_layers", n_layers)
        return tuple(SLIDING if on and i >= first else FULL for i in range(n_layers))
    if sliding == "alternate":
        return tuple(SLIDING if (i + 1) % 2 else FULL for i in range(n_layers))
    if sliding == "pattern":
        every = keys.int("sliding_window_pattern", 6)
        if every < 1:
            raise QkvError(f"{keys.where}: 'sliding_window_pattern' must be at least 1, got {every}")
        return tuple(SLIDING if (i + 1) % every else FULL for i in range(n_layers))
    return tuple(FULL for _ in range(n_layers))


def ropes(keys, head_dim: int, partial, theta, local_theta, max_positions: int, factors=None,
          aliases=None) -> dict[str, Rope]:  # fmt: skip
    """{layer type or "": Rope}. v5 files: `rope_parameters` (flat, or one dict per layer type); older: `rope_theta`
    and `rope_scaling` (a Gemma 3 file's scaling applies to its full-attention layers). factors: a GGUF file's
    rope_freqs (Llama 3.1's scaling as llama.cpp stores it), for the one RoPE of a llama file. aliases: a family's
    old names of RoPE types (Phi-3's "su")."""
    params = keys.get("rope_parameters", None)
    if isinstance(params, dict) and params and all(k in (SLIDING, FULL) for k in params):
        if not all(isinstance(p, dict) for p in params.values()):
            raise QkvError(f"{keys.where}: 'rope_parameters' must map each layer type to an object, got {params!r}")
        out = {kind: one(keys, p, head_dim, partial, theta[1], max_positions, None, aliases)
               for kind, p in params.items()}  # fmt: skip
        out[""] = out.get(FULL) or next(iter(out.values()))
        return out
    if params is not None and not isinstance(params, dict):
        raise QkvError(f"{keys.where}: 'rope_parameters' must be an object, got {params!r}")
    merged = dict(params or {})
    scaling = keys.get("rope_scaling", None)
    if scaling is not None and not isinstance(scaling, dict):
        raise QkvError(f"{keys.where}: 'rope_scaling' must be an object or null, got {scaling!r}")
    if "rope_theta" not in merged:
        merged["rope_theta"] = keys.number(theta[0], theta[1])
    if partial[0] and "partial_rotary_factor" not in merged:
        merged["partial_rotary_factor"] = keys.number(partial[0], partial[1])
    full = one(keys, merged | (scaling or {}), head_dim, partial, theta[1], max_positions, factors, aliases)
    if local_theta is None:
        return {"": full}
    local = one(
        keys, {"rope_theta": keys.number(local_theta[0], local_theta[1])}, head_dim, partial, theta[1], max_positions
    )
    return {"": full, FULL: full, SLIDING: local}


def one(keys, p: dict, head_dim: int, partial, default_theta: float, max_positions: int, factors=None,
        aliases=None) -> Rope:  # fmt: skip
    """One Rope from config.json's RoPE parameters, and a GGUF file's rope_freqs (`factors`, from gguf_map)."""
    kind = p.get("rope_type", p.get("type", "default"))
    kind = (aliases or {}).get(kind, kind) if isinstance(kind, str) else kind
    fraction = p.get("partial_rotary_factor", partial[1])
    try:
        fraction = float(fraction)
        if not 0 < fraction <= 1:
            raise QkvError(f"the rotated part of a head (partial_rotary_factor, or rotary_pct) must be in (0, 1], "
                           f"got {fraction}")  # fmt: skip
        rot = int(head_dim * fraction)
        rot -= rot % 2
        # Phi-3 files keep original_max_position_embeddings beside rope_scaling, not in it
        original = int(p.get("original_max_position_embeddings") or keys.get("original_max_position_embeddings", 0)
                       or max_positions)  # fmt: skip
        return Rope(
            theta=float(p.get("rope_theta", default_theta)),
            rot=rot,
            kind=str(kind),
            factor=float(p.get("factor") or (max_positions / original if kind == "longrope" else 1.0)),
            max_positions=max_positions,
            original_max_positions=original,
            low_freq_factor=float(p.get("low_freq_factor", 1.0)),
            high_freq_factor=float(p.get("high_freq_factor", 4.0)),
            attention_factor=None if p.get("attention_factor") is None else float(p["attention_factor"]),
            beta_fast=float(p.get("beta_fast") or 32),
            beta_slow=float(p.get("beta_slow") or 1),
            mscale=None if p.get("mscale") is None else float(p["mscale"]),
            mscale_all_dim=None if p.get("mscale_all_dim") is None else float(p["mscale_all_dim"]),
            truncate=bool(p.get("truncate", True)),
            short_factor=factors_of(p.get("short_factor")),
            long_factor=factors_of(p.get("long_factor")),
            freq_factors=None if factors is None else tuple(float(f) for f in factors),
        )
    except (TypeError, ValueError, OverflowError) as exc:
        raise QkvError(f"{keys.where}: the RoPE parameters {p!r} are not valid ({exc})") from None
    except QkvError as exc:
        raise QkvError(f"{keys.where}: {exc}") from None


def factors_of(value) -> tuple[float, ...] | None:  # LongRoPE's short_factor / long_factor lists
    if value is None:
        return None
    if not isinstance(value, list) or len(value) > MAX_WIDTH:
        raise ValueError(f"a list of factors, got {value!r}")
    return tuple(float(v) for v in value)


def kv_heads(keys, tau: int) -> int:
    """G: num_key_value_heads (absent or null: as many as query heads); 0 or negative is refused, not defaulted."""
    G = keys.int("num_key_value_heads", None)
    if G is None:
        return tau
    if G < 1:
        raise QkvError(f"{keys.where}: 'num_key_value_heads' must be at least 1, got {G}")
    return G
