"""DeepSeekMoE layers (DeepSeek-V2/V3): E routed experts, the top k of them per token, and shared experts every
token goes through, after the first `first_k_dense_replace` layers (which keep a dense MLP).

    s = sigmoid(x W_r^T)                                   router scores [m, E]
    top = group-limited top-k of s + b_corr                (e_score_correction_bias steers the choice only)
    g = s_top / sum(s_top) * routed_scaling_factor         (norm_topk_prob)
    MoE(x) = sum_j g_j FFN_top_j(x) + FFN_shared(x)        FFN(x) = W_down (silu(W_gate x) * W_up x)

The router is models.moe's sigmoid_groups; the checkpoint's names are Hugging Face's (`mlp.gate`, `mlp.experts.e.*`,
`mlp.shared_experts.*`), one matrix per expert.
"""

from __future__ import annotations

from dataclasses import dataclass

from qkv_cli.models.config import ModelConfig, Param
from qkv_cli.models.moe import Moe

ROLE_OF = {"gate_proj": "gate", "up_proj": "up", "down_proj": "down"}


def options(keys, n_layers: int, router: str = "sigmoid_groups") -> Moe | None:
    """The Moe options, or None when every layer is dense (no routed experts, or first_k_dense_replace >= L).
    router: DeepSeek-V3's sigmoid_groups; DeepSeek-V2's softmax_topk ("greedy") or softmax_groups, whose weights
    transformers never renormalises."""
    experts = keys.int("n_routed_experts", None)
    dense = keys.int("first_k_dense_replace", 0)
    if experts is None or dense >= n_layers:
        return None  # 0 experts on a MoE layer is refused by Moe
    d_expert = keys.int("moe_intermediate_size")
    return Moe(
        experts=experts,
        top_k=keys.int("num_experts_per_tok"),
        router=router,
        normalise=keys.bool("norm_topk_prob", True) if router == "sigmoid_groups" else False,
        scaling=keys.number("routed_scaling_factor", 1.0),
        d_expert=d_expert,
        d_shared=keys.int("n_shared_experts", 0) * d_expert,
        groups=keys.int("n_group", 1),
        top_groups=keys.int("topk_group", 1),
        dense_layers=tuple(range(max(dense, 0))),
    )


def is_moe(c: ModelConfig, l: int) -> bool:
    return c.moe is not None and l not in c.moe.dense_layers


def tensor_names(c: ModelConfig, p: str, r: str) -> dict[str, tuple[tuple[int, ...], str]]:
    """A MoE layer's MLP tensors: layer prefix p ('layers.3.'), role prefix r ('3.') -> name: (shape, role)."""
    o, d = c.moe, c.d
    out = {p + "mlp.gate.weight": ((o.experts, d), r + "ds_router.w")}
    if o.router == "sigmoid_groups":  # DeepSeek-V3's correction bias (V2 has none)
        out[p + "mlp.gate.e_score_correction_bias"] = ((o.experts,), r + "ds_router.bias")
    widths = [(f"experts.{e}.", f"expert{e}.", o.d_expert) for e in range(o.experts)]
    if o.d_shared:
        widths.append(("shared_experts.", "shared.", o.d_shared))
    for module, role, de in widths:
        for name, shape in (("gate_proj", (de, d)), ("up_proj", (de, d)), ("down_proj", (d, de))):
            out[f"{p}mlp.{module}{name}.weight"] = (shape, f"{r}{role}{ROLE_OF[name]}.w")
    return out


def parameter_table(c: ModelConfig, dense_table: list[Param]) -> list[Param]:
    """The decoder's table with its MLP rows counted on the dense layers only, and the MoE layers' rows."""
    o, d = c.moe, c.d
    n_moe = c.n_layers - len([l for l in o.dense_layers if l < c.n_layers])
    mlp = ("W_gate", "W_up", "W_down")
    out = []
    for row in dense_table:
        if row.name in mlp:
            row = Param(row.name, row.notation, row.shape, c.n_layers - n_moe, row.meaning + " (dense layers)")
            if row.count == 0:
                continue
        out.append(row)
        if row.name == "W_down" or (row.name == "mlp_in_norm" and n_moe == c.n_layers):
            out += [
                Param("W_router", "W_r", (d, o.experts), n_moe, "router: one score per expert"),
                *(
                    [Param("b_corr", "b_corr", (o.experts,), n_moe, "router correction bias (steers the choice only)")]
                    if o.router == "sigmoid_groups"
                    else []
                ),
                Param("W_gate_e", "W_gate^e", (d, o.d_expert), n_moe * o.experts, "routed expert e, gate"),
                Param("W_up_e", "W_up^e", (d, o.d_expert), n_moe * o.experts, "routed expert e, expansion"),
                Param("W_down_e", "W_down^e", (o.d_expert, d), n_moe * o.experts, "routed expert e, back to d"),
            ]
            if o.d_shared:
                out += [
                    Param("W_gate_s", "W_gate^s", (d, o.d_shared), n_moe, "shared experts, gate"),
                    Param("W_up_s", "W_up^s", (d, o.d_shared), n_moe, "shared experts, expansion"),
                    Param("W_down_s", "W_down^s", (o.d_shared, d), n_moe, "shared experts, back to d"),
                ]
    return out


@dataclass
class MoeLayer:
    """One MoE layer's MLP: router, correction bias, the routed experts (stacked) and the shared experts."""

    router: object  # layers.Linear, W_r (E, d)
    correction: object  # (E,) e_score_correction_bias
    experts: object  # moe.Experts
    shared: object  # a callable x -> FFN_shared(x), or None
    options: Moe

    def __call__(self, x):  # [m, d] -> [m, d], moe.Routing
        from qkv_cli.models.moe import moe_mlp

        return moe_mlp(x, self.router, self.options, self.experts, self.shared, self.correction)


def weights(get, c: ModelConfig, l: int, act) -> MoeLayer:
    """Layer l's MoeLayer. get(role) -> the tensor; act: the activation function."""
    import numpy as np

    from qkv_cli.models.layers import Linear
    from qkv_cli.models.moe import Experts

    o, r = c.moe, f"{l}."
    stack = {k: np.stack([get(f"{r}expert{e}.{k}.w") for e in range(o.experts)]) for k in ROLE_OF.values()}
    shared = None
    if o.d_shared:
        gate, up, down = (Linear(get(f"{r}shared.{k}.w"), None, out_in=True) for k in ROLE_OF.values())

        def shared(x):  # W_down (act(W_gate x) * W_up x)
            g = act(gate(x))
            g *= up(x)
            return down(g)

    return MoeLayer(
        Linear(get(r + "ds_router.w"), None, out_in=True),
        get(r + "ds_router.bias") if o.router == "sigmoid_groups" else None,
        Experts(stack["gate"], stack["up"], stack["down"], act),
        shared,
        o,
    )
