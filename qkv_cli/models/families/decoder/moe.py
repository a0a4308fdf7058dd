"""A MoE family's config.json keys (its Spec's MoeKeys), read into models.layers.moe.Moe, and its experts' tensor names.

    Mixtral     num_local_experts, num_experts_per_tok; experts as wide as intermediate_size; always renormalised
    Qwen3-MoE   num_experts, num_experts_per_tok, moe_intermediate_size, norm_topk_prob; dense MLP layers are
                `mlp_only_layers` and those not a multiple of `decoder_sparse_step`
    OLMoE       num_experts, num_experts_per_tok, intermediate_size, norm_topk_prob (default false)
    DeepSeek    n_routed_experts (absent: a dense model), num_experts_per_tok, moe_intermediate_size, norm_topk_prob
                (V3), routed_scaling_factor, n_shared_experts (one gated MLP n_shared * d_expert wide), n_group,
                topk_group; the first `first_k_dense_replace` layers dense; V3's router has a correction bias

Every count is checked (zero or negative experts, more experts per token than experts) before a tensor is read.
"""

from __future__ import annotations

from dataclasses import dataclass

from qkv_cli.errors import QkvError
from qkv_cli.models.formats.hf_experts import CORRECTION, NAMES, PROJ, ROLES, SHARED
from qkv_cli.models.layers.moe import Experts, Moe, MoeLayer


@dataclass(frozen=True)
class MoeKeys:
    """How a family names its MoE keys and tensors. experts, d_expert: config keys tried in order, then a default.
    normalise: (key, default), or a fixed bool. sparse_step: Qwen3-MoE's decoder_sparse_step / mlp_only_layers.
    names: NAMES' key for its tensors. DeepSeekMoE's keys, each None (or False) where a family has none: shared
    (the count of shared experts, each d_expert wide), scaling (routed_scaling_factor), groups (n_group and
    topk_group), first_dense (the count of dense first layers), correction (the router's correction bias); optional:
    a config without the experts key is a dense model."""

    experts: tuple = ("num_local_experts", 8)
    top_k: tuple = ("num_experts_per_tok", 2)
    d_expert: tuple = ("intermediate_size",)
    normalise: tuple | bool = True
    router: str = "softmax_topk"
    sparse_step: bool = False
    names: str = "mixtral"
    shared: str | None = None
    scaling: str | None = None
    groups: bool = False
    first_dense: str | None = None
    correction: bool = False
    optional: bool = False

    def __post_init__(self):
        if self.names not in NAMES:
            raise QkvError(f"MoE tensor naming {self.names!r} is not one of {', '.join(NAMES)}")


def _first(keys, choices: tuple, kind: str = "int"):
    """The first of the keys choices[:-1] that config.json has; else the last item (a default), or required."""
    names, default = (choices[:-1], choices[-1]) if len(choices) > 1 else (choices, None)
    for key in names:
        if keys.get(key, None) is not None:
            return key, getattr(keys, kind)(key)
    if default is None:
        keys.get(names[0])  # a required key: one line naming it
    return names[0], default


def read(keys, n_layers: int, spec: MoeKeys) -> Moe | None:
    """The Moe options of a family whose config.json names them as `spec` says; None for a dense model (`optional`
    and no experts key, or every layer one of the first dense ones)."""
    first = keys.int(spec.first_dense, 0) if spec.first_dense else 0
    if spec.optional and (keys.get(spec.experts[0], None) is None or first >= n_layers):
        return None
    e_key, experts = _first(keys, spec.experts)
    k_key, top_k = _first(keys, spec.top_k)
    d_key, d_expert = _first(keys, spec.d_expert)
    for key, value, least in ((e_key, experts, 1), (k_key, top_k, 1), (d_key, d_expert, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise QkvError(f"{keys.where}: '{key}' must be at least {least}, got {value!r}")
    if top_k > experts:
        raise QkvError(f"{keys.where}: '{k_key}' ({top_k}) cannot exceed '{e_key}' ({experts}): a token chooses "
                       "among the experts")  # fmt: skip
    normalise = keys.bool(*spec.normalise) if isinstance(spec.normalise, tuple) else spec.normalise
    dense = dense_layers(keys, n_layers) if spec.sparse_step else tuple(range(max(first, 0)))
    extra = {}
    if spec.shared:
        n_shared = keys.int(spec.shared, 0)
        if n_shared < 0:
            raise QkvError(f"{keys.where}: '{spec.shared}' must be at least 0, got {n_shared}")
        extra["d_shared"] = n_shared * d_expert
    if spec.scaling:
        extra["scaling"] = keys.number(spec.scaling, 1.0)
    if spec.groups:
        extra |= {"groups": keys.int("n_group", 1), "top_groups": keys.int("topk_group", 1)}
    try:
        return Moe(experts, top_k, spec.router, normalise, d_expert=d_expert, dense_layers=dense, names=spec.names,
                   correction=spec.correction, **extra)  # fmt: skip
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
    """A MoE layer's router, experts and shared expert(s): name (after 'layers.l.') -> (shape, role); roles
    'l.router.w' (and 'l.router.correction'), 'l.experts.e.gate.w' / '.up.w' / '.down.w' for each expert e (unless
    the family names its own), 'l.shared.gate.w' / '.up.w' / '.down.w'."""
    o, d = c.mlp.moe, c.d
    module, router, expert = NAMES[o.names]
    r = f"{layer}."
    out = {f"{module}.{router}.weight": ((o.experts, d), r + "router.w")}
    if o.correction:
        out[f"{module}.{router}.{CORRECTION}"] = ((o.experts,), r + "router.correction")
    widths = [(f"experts.{e}.", expert, f"experts.{e}.", o.d_expert) for e in range(o.experts) if expert]
    if o.d_shared:
        widths.append((SHARED[o.names] + ".", PROJ, "shared.", o.d_shared))
    for p, names, role, de in widths:
        for name, x, shape in zip(names, ROLES, ((de, d), (de, d), (d, de)), strict=True):
            out[f"{module}.{p}{name}.weight"] = (shape, f"{r}{role}{x}.w")
    return out


def weights(get, c, layer: int, experts=None) -> MoeLayer:
    """Layer `layer`'s MoeLayer (get(role) -> the tensor, or None): the router W_r [E, d] (gpt-oss's bias b_r), its
    correction bias, the experts (a family's own, else E x [d_e, d], [d_e, d], [d, d_e] as read: no stacked copy)
    and the shared expert(s): FFN_shared(x) = W_down^s (act(W_gate^s x) * W_up^s x), one gated MLP."""
    from functools import partial

    from qkv_cli.models.layers.basic import ACTIVATIONS, Linear

    o, r, act = c.mlp.moe, f"{layer}.", ACTIVATIONS[c.activation]
    if experts is None:
        experts = Experts(*([get(f"{r}experts.{e}.{x}.w") for e in range(o.experts)] for x in ROLES), act)
    shared = partial(Experts(*([get(f"{r}shared.{x}.w")] for x in ROLES), act), 0) if o.d_shared else None
    router = Linear(get(r + "router.w"), get(r + "router.b"), out_in=True)
    return MoeLayer(router, experts, shared, get(r + "router.correction") if o.correction else None)
