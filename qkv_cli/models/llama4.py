"""Llama 4 (text): Llama with chunked attention, NoPE layers with a query temperature, and a weightless QK-norm.

    RoPE layers (`no_rope_layers` 1):  Q, K rotated, then Q, K / sqrt(mean(x^2) + eps) (`use_qk_norm`, no weight);
        chunked (`attention_chunk_size` n_ch): query i sees keys t with t // n_ch = i // n_ch and t <= i
    NoPE layers (0; every 4th by default): no rotation, causal over every earlier key, and the query at position p
        times log(floor((p + 1) / floor_scale) + 1) attn_scale + 1 (`attn_temperature_tuning`)
    MLP: the dense layers' SwiGLU is `intermediate_size_mlp` wide, under `feed_forward` in the checkpoint

Llama 4 turns pairs of adjacent dimensions, (x_2k, x_2k+1) as one complex number, where qkv's RoPE turns halves
(x_k, x_k+d_k/2). The rows of W^q and W^k are reordered per head at load, pairs to halves, as for llama.cpp's files:
Q and K hold transformers' numbers in another column order, and every score and weight is the same.
"""

from __future__ import annotations

from dataclasses import replace

from qkv_cli.errors import QkvError
from qkv_cli.models import decoder, decoder_config
from qkv_cli.models.gguf_map import unpermute

BASE = decoder  # everything else: the shared RoPE decoder
MODEL_TYPE = "llama4_text"
PREFIXES = ("model.", "")
SPEC = decoder_config.Spec(names="llama4", nope=True, sliding="chunk", theta=("rope_theta", 500_000.0))


def read_config(keys) -> dict:
    fields = decoder_config.read(keys, SPEC)
    try:
        return _llama4(keys, fields)
    except QkvError as exc:
        message = str(exc)
        raise QkvError(message if message.startswith(keys.where) else f"{keys.where}: {message}") from None


def _llama4(keys, fields: dict) -> dict:
    n_layers, nope = fields["n_layers"], fields["rope"].no_rope
    tuning = keys.bool("attn_temperature_tuning", True)
    temperature = (keys.number("floor_scale", 8192), keys.number("attn_scale", 0.1)) if tuning and nope else None
    fields["attention"] = replace(
        fields["attention"], l2_qk_norm=keys.bool("use_qk_norm", True), temperature=temperature
    )
    moe = moe_layers(keys, n_layers)
    if moe:
        raise QkvError(f"mixture-of-experts layers ({', '.join(map(str, moe))}) are not supported yet: qkv runs "
                       "Llama 4 files whose every layer is dense (moe_layers [])")  # fmt: skip
    fields["d_ff"] = keys.int("intermediate_size_mlp", 16384)  # the dense layers' width
    return fields


def moe_layers(keys, n_layers: int) -> tuple[int, ...]:
    """`moe_layers`, or every `interleave_moe_layer_step`-th layer (the step-th, 2 step-th ...) as Llama4TextConfig
    makes the list."""
    given = keys.get("moe_layers", None)
    if given is None:
        step = keys.int("interleave_moe_layer_step", 1)
        if step < 1:
            raise QkvError(f"'interleave_moe_layer_step' must be at least 1, got {step}")
        return tuple(range(step - 1, n_layers, step))
    if not isinstance(given, list) or any(isinstance(l, bool) or not isinstance(l, int) for l in given):
        raise QkvError(f"'moe_layers' must list layer indices, got {given!r}")
    if any(not 0 <= l < n_layers for l in given) or len(set(given)) != len(given):
        raise QkvError(f"'moe_layers' must list distinct layers of 0..{n_layers - 1}, got {given!r}")
    return tuple(sorted(given))


class PairsToHalves:
    """The checkpoint's tensors with each head's rows of W^q and W^k (and their biases) reordered from Llama 4's
    pairs (2k, 2k+1) to the halves (k, k + d_k/2) that qkv's RoPE turns; every other tensor as it is."""

    def __init__(self, w, c):
        self.w, self.heads = w, {"q_proj": c.n_heads, "k_proj": c.n_kv_heads}

    def __call__(self, key: str):
        x = self.w(key)
        parts = key.split(".")
        heads = self.heads.get(parts[-2]) if len(parts) > 1 and "self_attn" in parts else None
        return x if heads is None else unpermute(x, heads)

    def __contains__(self, key: str) -> bool:
        return key in self.w

    def __getattr__(self, name):  # nbytes, rows ...: the checkpoint's own
        return getattr(self.w, name)


def prepare(w, c, dtype):
    """The shared decoder's prepare, over the tensors with W^q and W^k in halves (see PairsToHalves)."""
    return decoder.prepare(PairsToHalves(w, c), c, dtype)
