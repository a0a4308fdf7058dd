"""The mixture-of-experts MLP (sparsely gated, Shazeer et al. 2017; Switch / Mixtral / DeepSeekMoE): a router picks k
of E expert MLPs for each token and the layer's output is their weighted sum.

    z = x W_r^T (+ b_r)                       router logits [m, E]
    (top, g) = route(z)                        the k chosen experts [m, k] and their gate weights [m, k]
    MoE(x)_i = sum_j g_ij FFN_top_ij(x_i)      (+ FFN_shared(x_i): DeepSeek-V3, Llama 4)
    Llama 4 scales the input instead:  sum_j FFN_top_ij(g_ij x_i)

The routers (ROUTERS, one function per family's rule, same signature):
    softmax_topk   p = Softmax(z) over all E; the k largest; renormalised to sum 1 when `normalise`
                   (Mixtral always, Qwen3-MoE / OLMoE as norm_topk_prob says)
    topk_softmax   the k largest logits; g = Softmax over those k (gpt-oss)
    sigmoid_groups s = sigmoid(z); the choice ranks s + b_corr (e_score_correction_bias) within the top_groups of
                   `groups` groups (a group scored by the sum of its two best); g = s of the chosen, renormalised
                   when `normalise` (DeepSeek-V3)
    topk_sigmoid   the k largest logits; g = sigmoid of those (Llama 4), applied to the expert's input
    softmax_groups p = Softmax(z); the k largest within the top_groups groups (a group scored by its best p)
                   (DeepSeek-V2's group_limited_greedy)
Every router multiplies g by `scaling` (routed_scaling_factor; 1 but for DeepSeek-V3). Only the tokens routed to an
expert go through it (`mixture`). numpy only; every step keeps the input's dtype.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from qkv_cli.errors import QkvError

MAX_EXPERTS = 4096  # real models have 8 to 512; more is a broken file (and a huge allocation per layer)


class Routing(NamedTuple):
    top: np.ndarray  # [m, k] expert indices, best first
    weights: np.ndarray  # [m, k] gate weights g (what multiplies each expert's output, or input: Llama 4)


@dataclass(frozen=True)
class Moe:
    """A MoE MLP's options, as the config reader builds them; a bad value is a QkvError at construction."""

    experts: int  # E routed experts per MoE layer
    top_k: int  # k experts chosen per token
    router: str = "softmax_topk"  # ROUTERS
    normalise: bool = False  # renormalise the k weights to sum 1 (norm_topk_prob)
    scaling: float = 1.0  # routed_scaling_factor: multiplies the k weights
    d_expert: int = 1  # each expert's hidden width (moe_intermediate_size, or intermediate_size)
    d_shared: int = 0  # the width of the shared expert(s) every token goes through (0: none); DeepSeek's n_shared
    # experts are one gated MLP n_shared * d_expert wide (their rows stacked), Llama 4's one as wide as an expert
    correction: bool = False  # the router has a correction bias b_corr (e_score_correction_bias: sigmoid_groups)
    groups: int = 1  # n_group: experts split in groups (sigmoid_groups)
    top_groups: int = 1  # topk_group: the groups a token may choose from
    dense_layers: tuple[int, ...] = ()  # layers with a dense MLP instead (mlp_only_layers, first_k_dense_replace)
    names: str = "mixtral"  # how the checkpoint names the router and experts (formats.hf_experts.NAMES)

    def __post_init__(self):
        for name in ("experts", "top_k", "d_expert", "groups", "top_groups"):
            _count(name, getattr(self, name), 1)
        _count("d_shared", self.d_shared, 0)
        if self.experts > MAX_EXPERTS:
            raise QkvError(f"{self.experts} experts is more than qkv reads ({MAX_EXPERTS})")
        if self.top_k > self.experts:
            raise QkvError(f"the experts chosen per token ({self.top_k}) cannot exceed the experts ({self.experts})")
        if self.router not in ROUTERS:
            raise QkvError(f"router {self.router!r} is not supported: use one of {', '.join(ROUTERS)}")
        if not isinstance(self.normalise, bool):
            raise QkvError(f"norm_topk_prob must be true or false, got {self.normalise!r}")
        if not isinstance(self.correction, bool) or (self.correction and self.router != "sigmoid_groups"):
            raise QkvError(f"a correction bias (true or false) steers the sigmoid_groups router only, got "
                           f"{self.correction!r} for {self.router}")  # fmt: skip
        s = self.scaling
        if isinstance(s, bool) or not isinstance(s, int | float) or not (math.isfinite(s) and s > 0):
            raise QkvError(f"routed_scaling_factor must be a positive number, got {s!r}")
        if self.experts % self.groups:
            raise QkvError(f"the experts ({self.experts}) must split evenly into n_group ({self.groups}) groups")
        if self.top_groups > self.groups:
            raise QkvError(f"topk_group ({self.top_groups}) cannot exceed n_group ({self.groups})")
        if self.router == "sigmoid_groups":
            if self.experts // self.groups < 2:
                raise QkvError(f"each of the {self.groups} expert groups needs at least 2 experts (a group is "
                               "scored by its two best)")  # fmt: skip
            if self.top_k > self.top_groups * (self.experts // self.groups):
                raise QkvError(f"{self.top_k} experts per token cannot be chosen from {self.top_groups} groups of "
                               f"{self.experts // self.groups}")  # fmt: skip
        if any(isinstance(l, bool) or not isinstance(l, int) or l < 0 for l in self.dense_layers):
            raise QkvError(f"dense MLP layers must be layer indices, got {self.dense_layers!r}")

    @property
    def scales_input(self) -> bool:  # Llama 4: g multiplies the expert's input, not its output
        return self.router in INPUT_SCALED


def _count(name: str, value, least: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise QkvError(f"{name} must be a whole number of at least {least}, got {value!r}")


def top_k(s, k: int):  # [m, E] -> [m, k]: the indices of the k largest, best first (ties: the lower index)
    return np.argsort(-s, axis=-1, kind="stable")[:, :k]


def softmax(z):  # [m, n] -> [m, n], rows sum to 1 (the row max subtracted)
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def sigmoid(z):  # [...] -> [...]; 1 / (1 + exp(-z)), without overflow for very negative z
    e = np.exp(-np.abs(z))
    one = z.dtype.type(1)
    return np.where(z >= 0, one / (one + e), e / (one + e))


def _renormalise(g, eps: float = 0.0):  # [m, k] -> [m, k], rows sum to 1
    return g / (g.sum(axis=-1, keepdims=True) + g.dtype.type(eps))


def softmax_topk(z, o: Moe, correction=None):  # [m, E] -> [m, k], [m, k]
    p = softmax(z)
    top = top_k(p, o.top_k)
    g = np.take_along_axis(p, top, axis=-1)
    return top, _renormalise(g) if o.normalise else g


def topk_softmax(z, o: Moe, correction=None):  # [m, E] -> [m, k], [m, k]
    top = top_k(z, o.top_k)
    return top, softmax(np.take_along_axis(z, top, axis=-1))


def sigmoid_groups(z, o: Moe, correction=None):  # [m, E], [E] -> [m, k], [m, k]
    s = sigmoid(z)
    choice = s if correction is None else s + correction.astype(s.dtype)  # the bias steers the choice only
    m, per = z.shape[0], o.experts // o.groups
    grouped = choice.reshape(m, o.groups, per)  # (m, E) -> (m, groups, E / groups)
    best2 = -np.sort(-grouped, axis=-1)[..., :2]
    score = best2[..., 0] + best2[..., 1]  # (m, groups): the sum of each group's two best
    keep = np.zeros((m, o.groups), dtype=bool)
    np.put_along_axis(keep, top_k(score, o.top_groups), True, axis=-1)
    choice = np.where(np.repeat(keep, per, axis=-1), choice, -np.inf)
    top = top_k(choice, o.top_k)
    g = np.take_along_axis(s, top, axis=-1)
    return top, _renormalise(g, 1e-20) if o.normalise else g


def softmax_groups(z, o: Moe, correction=None):  # [m, E] -> [m, k], [m, k]
    """DeepSeek-V2's group_limited_greedy: p = Softmax(z); a group is scored by its best p; outside the top_groups
    groups p counts as 0; the k largest, their p as weights (renormalised when `normalise`)."""
    p = softmax(z)
    m, per = z.shape[0], o.experts // o.groups
    best = p.reshape(m, o.groups, per).max(axis=-1)  # (m, groups)
    keep = np.zeros((m, o.groups), dtype=bool)
    np.put_along_axis(keep, top_k(best, o.top_groups), True, axis=-1)
    top = top_k(np.where(np.repeat(keep, per, axis=-1), p, p.dtype.type(0)), o.top_k)
    g = np.take_along_axis(p, top, axis=-1)
    return top, _renormalise(g) if o.normalise else g


def topk_sigmoid(z, o: Moe, correction=None):  # [m, E] -> [m, k], [m, k]
    top = top_k(z, o.top_k)
    return top, sigmoid(np.take_along_axis(z, top, axis=-1))


ROUTERS = {
    "softmax_topk": softmax_topk,  # Mixtral, Qwen3-MoE, OLMoE
    "topk_softmax": topk_softmax,  # gpt-oss
    "sigmoid_groups": sigmoid_groups,  # DeepSeek-V3
    "softmax_groups": softmax_groups,  # DeepSeek-V2 (group_limited_greedy)
    "topk_sigmoid": topk_sigmoid,  # Llama 4
}  # kind -> (z [m, E], Moe, correction [E] or None) -> (top [m, k], weights [m, k])
INPUT_SCALED = ("topk_sigmoid",)  # routers whose weights scale the expert's input


def route(z, o: Moe, correction=None) -> Routing:  # [m, E] -> Routing([m, k], [m, k])
    """The router's choice for each token: the kind's rule, then routed_scaling_factor."""
    top, g = ROUTERS[o.router](z, o, correction)
    if o.scaling != 1:
        g = g * g.dtype.type(o.scaling)
    return Routing(top, g.astype(z.dtype, copy=False))


def stacked(routing: dict, n_layers: int) -> dict:  # {layer: Routing [m, k]} -> router_top, router_weights (L, m, k)
    """Every layer's routing as two arrays (a Result's router_top and router_weights): a dense layer's rows are -1
    (no expert) and weight 0. Empty for a model without experts."""
    if not routing:
        return {}
    top0, g0 = next(iter(routing.values()))
    top = np.full((n_layers, *top0.shape), -1, dtype=np.int64)
    g = np.zeros((n_layers, *g0.shape), dtype=g0.dtype)
    for l, (t, w) in routing.items():
        top[l], g[l] = t, w
    return {"router_top": top, "router_weights": g}


def mixture(x, routing: Routing, expert_fn, scale_input: bool = False):  # [m, d], ([m, k], [m, k]) -> [m, d]
    """sum_j g_ij FFN_top_ij(x_i), each expert run once on the tokens routed to it (ascending expert order, as
    transformers adds them). expert_fn(e, x_rows [r, d]) -> [r, d]. scale_input: FFN_top_ij(g_ij x_i) (Llama 4)."""
    out = np.zeros_like(x)
    top, g = routing
    for e in np.unique(top):
        rows, slot = np.nonzero(top == e)  # each token chooses an expert at most once
        w = g[rows, slot][:, None]
        out[rows] += expert_fn(int(e), x[rows] * w) if scale_input else expert_fn(int(e), x[rows]) * w
    return out


@dataclass
class Experts:
    """E gated expert MLPs: FFN_e(x) = W_down[e] (act(W_gate[e] x) * W_up[e] x), each matrix PyTorch's (out, in).
    A stacked array [E, out, in] or a list of E matrices (as read: no stacked copy of a layer's experts)."""

    gate: Sequence[np.ndarray]  # E x [d_e, d]
    up: Sequence[np.ndarray]  # E x [d_e, d]
    down: Sequence[np.ndarray]  # E x [d, d_e]
    act: object  # the activation function (layers.ACTIVATIONS)

    def __call__(self, e: int, x):  # [r, d] -> [r, d]
        h = self.act(x @ self.gate[e].T)  # (r, d) x (d, d_e) -> (r, d_e)
        h *= x @ self.up[e].T
        return h @ self.down[e].T  # (r, d_e) x (d_e, d) -> (r, d)


def moe_mlp(x, router, o: Moe, experts, shared=None, correction=None):  # [m, d] -> [m, d], Routing
    """The MoE layer: router logits z = router(x) (a layers.Linear, W_r [E, d], with gpt-oss's bias), the routing,
    the mixture of the chosen experts, and the shared expert(s) on every token when there are (shared(x))."""
    routing = route(router(x), o, correction)
    y = mixture(x, routing, experts, o.scales_input)
    if shared is not None:
        y += shared(x)
    return y, routing


@dataclass
class MoeLayer:
    """One layer's MoE weights: the router W_r (a layers.Linear), the experts, the shared expert(s) and DeepSeek's
    e_score_correction_bias (None where the family has none)."""

    router: object  # x -> z [m, E]
    experts: object  # (e, x_rows) -> [r, d]: Experts, or a family's own
    shared: object = None  # x -> [m, d]
    correction: np.ndarray | None = None  # [E]

    def __call__(self, x, o: Moe):  # [m, d] -> [m, d], Routing
        return moe_mlp(x, self.router, o, self.experts, self.shared, self.correction)
