"""A MoE family's config.json keys (its Spec's MoeKeys), read into models.moe.Moe, and its experts' tensor names.

    Mixtral     num_local_experts, num_experts_per_tok; experts as wide as intermediate_size; always renormalised
    Qwen3-MoE   num_experts, num_experts_per_tok, moe_intermediate_size, norm_topk_prob; dense MLP layers are
                `mlp_only_layers` and those not a multiple of `decoder_sparse_step`
    OLMoE       num_experts, num_experts_per_tok, intermediate_size, norm_topk_prob (default false)

Every count is checked (zero or negative experts, more experts per token than experts) before a tensor is read.
"""

from __future__ import annotations

from dataclasses import dataclass

from qkv_cli.errors import QkvError
from qkv_cli.models.moe import Moe


@dataclass(frozen=True)
class MoeKeys:
    """How a family names its MoE keys and tensors. experts, d_expert: config keys tried in order, then a default.
    normalise: (key, default), or a fixed bool. sparse_step: Qwen3-MoE's decoder_sparse_step / mlp_only_layers.
    names: NAMES' key for its tensors."""

    experts: tuple = ("num_local_experts", 8)
    top_k: tuple = ("num_experts_per_tok", 2)
    d_expert: tuple = ("intermediate_size",)
    normalise: tuple | bool = True
    router: str = "softmax_topk"
    sparse_step: bool = False
    names: str = "mixtral"

    def __post_init__(self):
        if self.names not in NAMES:
            raise QkvError(f"MoE tensor naming {self.names!r} is not one of {', '.join(NAMES)}")


# the MoE sub-module, then the router's and each expert's W_gate, W_up, W_down names (Hugging Face)
NAMES = {
    "mixtral": ("block_sparse_moe", "gate", ("w1", "w3", "w2")),
    "qwen": ("mlp", "gate", ("gate_proj", "up_proj", "down_proj")),
}


def _first(keys, choices: tuple, kind: str = "int"):
    """The first of the keys choices[:-1] that config.json has; else the last item (a default), or required."""
    names, default = (choices[:-1], choices[-1]) if len(choices) > 1 else (choices, None)
    for key in names:
        if keys.get(key, None) is not None:
            return key, getattr(keys, kind)(key)
    if default is None:
        keys.get(names[0])  # a required key: one line naming it
    return names[0], default


def read(keys, n_layers: int, spec: MoeKeys) -> Moe:
    """The Moe options of a family whose config.json names them as `spec` says."""
    e_key, experts = _first(keys, spec.experts)
    k_key, top_k = _first(keys, spec.top_k)
    _, d_expert = _first(keys, spec.d_expert)
    for key, value, least in ((e_key, experts, 1), (k_key, top_k, 1), ("the experts' width", d_expert, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise QkvError(f"{keys.where}: '{key}' must be at least {least}, got {value!r}")
    if top_k > experts:
        raise QkvError(f"{keys.where}: '{k_key}' ({top_k}) cannot exceed '{e_key}' ({experts}): a token chooses "
                       "among the experts")  # fmt: skip
    normalise = keys.bool(*spec.normalise) if isinstance(spec.normalise, tuple) else spec.normalise
    dense = dense_layers(keys, n_layers) if spec.sparse_step else ()
    try:
        return Moe(experts, top_k, spec.router, normalise, d_expert=d_expert, dense_layers=dense, names=spec.names)
    except QkvError as exc:
        raise QkvError(f"{keys.where}: {exc}") from None


def dense_layers(keys, n_layers: int) -> tuple[int, ...]:
    """Qwen3-MoE: layer l is a MoE layer unless l is in `mlp_only_layers` or (l + 1) is not a multiple of
    `decoder_sparse_step`."""
    step = keys.int("decoder_sparse_step", 1)
    if step < 1:
        raise QkvError(f"{keys.where}: 'decoder_sparse_step' must be at least 1, got {step}")
    only = keys.get("mlp_only_layers", [])
    if not isinstance(only, list) or any(isinstance(l, bool) or not isinstance(l, int) for l in only):
        raise QkvError(f"{keys.where}: 'mlp_only_layers' must list layer indices, got {only!r}")
    if any(not 0 <= l < n_layers for l in only):
        raise QkvError(f"{keys.where}: 'mlp_only_layers' names a layer beyond the {n_layers} layers: {only!r}")
    return tuple(l for l in range(n_layers) if l in only or (l + 1) % step)


def is_moe(c, layer: int) -> bool:
    """Whether layer `layer` of config c has a MoE MLP (else the family's dense MLP)."""
    o = c.mlp.moe if c.mlp is not None else None
    return o is not None and layer not in o.dense_layers


def tensor_names(c, layer: int) -> dict[str, tuple[tuple[int, ...], str]]:
    """A MoE layer's router and experts: name (after 'layers.l.') -> (shape, role); roles 'l.router.w' and
    'l.experts.e.gate.w' / '.up.w' / '.down.w' for each expert e."""
    o, d = c.mlp.moe, c.d
    module, router, (gate, up, down) = NAMES[o.names]
    r = f"{layer}."
    out = {f"{module}.{router}.weight": ((o.experts, d), r + "router.w")}
    for e in range(o.experts):
        p = f"{module}.experts.{e}."
        out[p + gate + ".weight"] = ((o.d_expert, d), f"{r}experts.{e}.gate.w")
        out[p + up + ".weight"] = ((o.d_expert, d), f"{r}experts.{e}.up.w")
        out[p + down + ".weight"] = ((d, o.d_expert), f"{r}experts.{e}.down.w")
    return out
