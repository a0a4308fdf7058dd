"""Llama 4 (text): Llama with chunked attention, NoPE layers with a query temperature, and a weightless QK-norm.

    RoPE layers (`no_rope_layers` 1):  Q, K rotated, then Q, K / sqrt(mean(x^2) + eps) (`use_qk_norm`, no weight);
        chunked (`attention_chunk_size` n_ch): query i sees keys t with t // n_ch = i // n_ch and t <= i
    NoPE layers (0; every 4th by default): no rotation, causal over every earlier key, and the query at position p
        times log(floor((p + 1) / floor_scale) + 1) attn_scale + 1 (`attn_temperature_tuning`)
    MLP: the dense layers' SwiGLU is `intermediate_size_mlp` wide, under `feed_forward` in the checkpoint; the
        `moe_layers` (every `interleave_moe_layer_step`-th) a mixture of experts (layers.moe, router topk_sigmoid):
        z = x W_r^T, the k largest (num_experts_per_tok), g = sigmoid of those, and
        MoE(x) = sum_j FFN_top_j(g_j x) + FFN_shared(x)     every expert and the shared one `intermediate_size` wide
        (the experts stored stacked: gate_up_proj [E, d, 2 d_e], down_proj [E, d_e, d])

Llama 4 turns pairs of adjacent dimensions, (x_2k, x_2k+1) as one complex number, where qkv's RoPE turns halves
(x_k, x_k+d_k/2). The rows of W^q and W^k are reordered per head at load, pairs to halves, as for llama.cpp's files:
Q and K hold transformers' numbers in another column order, and every score and weight is the same.
"""

from __future__ import annotations

from dataclasses import replace
from functools import partial

from qkv_cli.errors import QkvError
from qkv_cli.models.families.decoder import block as decoder
from qkv_cli.models.families.decoder import config as decoder_config
from qkv_cli.models.families.decoder import moe as moe_config
from qkv_cli.models.families.decoder.names import tensor_names as dense_names
from qkv_cli.models.formats.gguf.mapping import unpermute
from qkv_cli.models.layers.basic import ACTIVATIONS
from qkv_cli.models.layers.moe import Experts, Moe

BASE = decoder  # everything else: the shared RoPE decoder
MODEL_TYPE = "llama4_text"
PREFIXES = ("model.", "")
SPEC = decoder_config.Spec(names="llama4", nope=True, sliding="chunk", theta=("rope_theta", 500_000.0))


def read_config(keys) -> dict:
    fields = decoder_config.read(keys, SPEC)
    with keys.located():
        return _llama4(keys, fields)


def _llama4(keys, fields: dict) -> dict:
    n_layers, nope = fields["n_layers"], fields["rope"].no_rope
    tuning = keys.bool("attn_temperature_tuning", True)
    temperature = (keys.number("floor_scale", 8192), keys.number("attn_scale", 0.1)) if tuning and nope else None
    fields["attention"] = replace(
        fields["attention"], l2_qk_norm=keys.bool("use_qk_norm", True), temperature=temperature
    )
    moe = moe_layers(keys, n_layers)
    if moe:
        experts, k = keys.int("num_local_experts", 16), keys.int("num_experts_per_tok", 1)
        if experts < 1 or not 1 <= k <= experts:
            raise QkvError(f"'num_experts_per_tok' ({k}) must be 1 to 'num_local_experts' ({experts}): a token "
                           "chooses among the experts")  # fmt: skip
        width = keys.int("intermediate_size", 8192)  # each expert's, and the shared expert's
        dense = tuple(l for l in range(n_layers) if l not in moe)
        o = Moe(experts, k, "topk_sigmoid", d_expert=width, d_shared=width, dense_layers=dense, names="llama4")
        fields["mlp"] = replace(fields["mlp"], moe=o)
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


def dense(c):  # the config with its MoE layers as dense ones: what the shared decoder names and counts
    return replace(c, mlp=replace(c.mlp, moe=None))


def tensor_names(c) -> dict:
    """The shared decoder's tensor names (name -> (shape, role)), a MoE layer's feed_forward replaced by the router
    and the shared expert (moe_config: roles l.router.w, l.shared.*) and the stacked experts (l.moe.gate_up,
    l.moe.down)."""
    out = dense_names(dense(c))
    if c.mlp.moe is None:
        return out
    E, de, d = c.mlp.moe.experts, c.mlp.moe.d_expert, c.d
    for l in range(c.n_layers):
        if not moe_config.is_moe(c, l):
            continue
        p, r = f"layers.{l}.feed_forward.", f"{l}.moe."
        for x in ("gate", "up", "down"):
            out.pop(f"{p}{x}_proj.weight")
        out |= {f"layers.{l}.{name}": spec for name, spec in moe_config.tensor_names(c, l).items()}
        out |= {p + "experts.gate_up_proj": ((E, d, 2 * de), r + "gate_up"),
                p + "experts.down_proj": ((E, de, d), r + "down")}  # fmt: skip
    return out


def tensor_shapes(c) -> dict:
    return {name: shape for name, (shape, _) in tensor_names(c).items()}


def fixed_keys(c) -> list[str]:
    return decoder.fixed_keys(dense(c))


def prepare(w, c, dtype):
    """The shared decoder's prepare, over the tensors with W^q and W^k in halves (see PairsToHalves), each MoE layer
    built by prepare_block."""
    return decoder.prepare(PairsToHalves(w, c), c, dtype, tensor_names(c), prepare_block)


def prepare_block(w, c, names: dict, l: int):
    """Layer l as the shared decoder builds it (a MoE layer's router and shared expert: moe_config.weights), with
    the routed experts as views of the stacked tensors, in models.layers.moe.Experts' [E, out, in] order."""
    return decoder.prepare_block(w, c, names, l, experts=partial(stacked_experts, c))


def stacked_experts(c, get, l: int) -> Experts:
    gate_up, down = get(f"{l}.moe.gate_up"), get(f"{l}.moe.down")  # [E, d, 2 d_e], [E, d_e, d]
    de, T = c.mlp.moe.d_expert, (0, 2, 1)
    return Experts(gate_up[..., :de].transpose(T), gate_up[..., de:].transpose(T), down.transpose(T),
                   ACTIVATIONS[c.activation])  # fmt: skip
