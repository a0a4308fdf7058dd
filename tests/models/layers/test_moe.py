"""The mixture-of-experts MLP (models.layers.moe): each router against hand-worked numbers and against transformers' own
router module of its family; the options' checks; the mixture against a dense loop over every token."""

from __future__ import annotations

import numpy as np
import pytest

from qkv_cli.errors import QkvError
from qkv_cli.models.layers import moe
from qkv_cli.models.layers.basic import Linear, silu
from qkv_cli.models.layers.moe import Experts, Moe, Routing, mixture, moe_mlp, route

E, K, D = 8, 2, 6


def logits(m=5, seed=0, dtype=np.float64):
    return np.random.default_rng(seed).normal(0, 2, (m, E)).astype(dtype)


# hand-worked: z = log of known probabilities, so each rule's answer is plain arithmetic
P = np.array([[0.1, 0.4, 0.2, 0.3]])
Z = np.log(P)


def test_softmax_topk_picks_the_largest_probabilities_and_renormalises_only_when_asked():
    top, g = route(Z, Moe(4, 2))
    assert top.tolist() == [[1, 3]]
    np.testing.assert_allclose(g, [[0.4, 0.3]], rtol=1e-12)
    _, g = route(Z, Moe(4, 2, normalise=True))
    np.testing.assert_allclose(g, [[0.4 / 0.7, 0.3 / 0.7]], rtol=1e-12)


def test_topk_softmax_is_a_softmax_over_the_chosen_logits_only():
    z = np.array([[1.0, 3.0, 0.0, 2.0]])
    top, g = route(z, Moe(4, 2, router="topk_softmax"))
    assert top.tolist() == [[1, 3]]
    np.testing.assert_allclose(g, [[np.e / (np.e + 1), 1 / (np.e + 1)]], rtol=1e-12)


def test_topk_sigmoid_weights_are_the_sigmoid_of_the_chosen_logits_and_scale_the_input():
    z = np.array([[1.0, 3.0, 0.0, -2.0]])
    o = Moe(4, 2, router="topk_sigmoid")
    top, g = route(z, o)
    assert top.tolist() == [[1, 0]] and o.scales_input and not Moe(4, 2).scales_input
    np.testing.assert_allclose(g, [[1 / (1 + np.exp(-3)), 1 / (1 + np.exp(-1))]], rtol=1e-12)


def test_sigmoid_groups_choose_with_the_bias_but_weigh_without_it():
    # 4 experts in 2 groups; sigmoid scores s; the bias lifts expert 3 into the choice
    s = np.array([[0.9, 0.8, 0.1, 0.2]])
    z = np.log(s / (1 - s))
    bias = np.array([0.0, 0.0, 0.0, 1.0])
    o = Moe(4, 2, router="sigmoid_groups", groups=2, top_groups=1, scaling=2.5)
    # groups scored by their two best with the bias: {0,1}: 1.7, {2,3}: 1.3 -> group 0 only
    top, g = route(z, o, bias)
    assert sorted(top[0].tolist()) == [0, 1]
    np.testing.assert_allclose(g, [[0.9 * 2.5, 0.8 * 2.5]], rtol=1e-12)
    # two groups allowed: expert 3 (0.2 + 1) beats 0.9 and 0.8 for the choice; its weight stays 0.2
    top, g = route(z, Moe(4, 2, router="sigmoid_groups", groups=2, top_groups=2, normalise=True), bias)
    assert top.tolist() == [[3, 0]]
    np.testing.assert_allclose(g, [[0.2 / 1.1, 0.9 / 1.1]], rtol=1e-12)


def test_sigmoid_has_no_overflow_for_very_negative_logits():
    with np.errstate(over="raise", invalid="raise", divide="raise"):
        s = moe.sigmoid(np.array([-1000.0, 0.0, 1000.0]))
    np.testing.assert_array_equal(s, [0.0, 0.5, 1.0])


@pytest.mark.parametrize("router", list(moe.ROUTERS))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_every_router_chooses_k_distinct_experts_with_finite_weights_in_the_input_dtype(router, dtype):
    o = Moe(E, K, router=router, groups=2, top_groups=1, normalise=True)
    top, g = route(logits(dtype=dtype), o, np.zeros(E))
    assert top.shape == g.shape == (5, K) and g.dtype == dtype and np.isfinite(g).all()
    assert all(len(set(row)) == K for row in top.tolist()) and ((0 <= top) & (top < E)).all()


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"experts": 0, "top_k": 1}, "experts must be a whole number of at least 1"),
        ({"experts": 4, "top_k": 5}, "cannot exceed the experts"),
        ({"experts": 4, "top_k": 0}, "top_k must be"),
        ({"experts": -2, "top_k": 1}, "experts must be"),
        ({"experts": 4, "top_k": 2, "router": "soft"}, "router 'soft' is not supported: use one of softmax_topk"),
        ({"experts": 4, "top_k": 2, "normalise": "yes"}, "norm_topk_prob must be true or false"),
        ({"experts": 4, "top_k": 2, "scaling": 0.0}, "routed_scaling_factor must be a positive number"),
        ({"experts": 4, "top_k": 2, "scaling": float("nan")}, "routed_scaling_factor"),
        ({"experts": 6, "top_k": 2, "groups": 4}, "split evenly"),
        ({"experts": 8, "top_k": 2, "groups": 2, "top_groups": 3}, "topk_group (3) cannot exceed n_group (2)"),
        ({"experts": 4, "top_k": 2, "router": "sigmoid_groups", "groups": 4, "top_groups": 2}, "at least 2 experts"),
        ({"experts": 8, "top_k": 3, "router": "sigmoid_groups", "groups": 4, "top_groups": 1}, "cannot be chosen"),
        ({"experts": 5000, "top_k": 2}, "more than qkv reads"),
        ({"experts": 4, "top_k": 2, "d_shared": -1}, "d_shared"),
        ({"experts": 4, "top_k": 2, "correction": True}, "correction bias (true or false) steers the sigmoid_groups"),
        ({"experts": 4, "top_k": 2, "router": "sigmoid_groups", "correction": 1}, "correction bias (true or false)"),
        ({"experts": 4, "top_k": 2, "dense_layers": (-1,)}, "layer indices"),
        ({"experts": 4, "top_k": True}, "top_k must be"),
    ],
)
def test_bad_options_are_refused_with_one_line(kwargs, message):
    with pytest.raises(QkvError, match=None) as err:
        Moe(**kwargs)
    assert message in str(err.value) and "\n" not in str(err.value)


def experts(seed=1, dtype=np.float64, e=E, d=D, de=4):
    r = np.random.default_rng(seed)
    return Experts(*(r.normal(0, 1, s).astype(dtype) for s in ((e, de, d), (e, de, d), (e, d, de))), silu)


def dense_loop(x, top, g, ex, scale_input=False):  # every token through its k experts, one at a time
    out = np.zeros_like(x)
    for i in range(x.shape[0]):
        for j in range(top.shape[1]):
            e = top[i, j]
            out[i] += ex(e, g[i, j] * x[i : i + 1])[0] if scale_input else g[i, j] * ex(e, x[i : i + 1])[0]
    return out


@pytest.mark.parametrize("scale_input", [False, True])
def test_mixture_equals_a_loop_over_tokens_and_runs_each_expert_once_on_its_tokens(scale_input):
    x = np.random.default_rng(2).normal(0, 1, (9, D))
    top, g = route(logits(9, 3), Moe(E, K, normalise=True))
    ex, seen = experts(), []

    def counted(e, rows):
        seen.append((e, rows.shape[0]))
        return ex(e, rows)

    got = mixture(x, Routing(top, g), counted, scale_input)
    np.testing.assert_allclose(got, dense_loop(x, top, g, ex, scale_input), rtol=1e-12, atol=1e-12)
    used = np.unique(top)
    assert [e for e, _ in seen] == used.tolist()  # once each, ascending
    assert [r for _, r in seen] == [int((top == e).sum()) for e in used]


def test_moe_mlp_adds_the_shared_expert_to_every_token():
    x = np.random.default_rng(4).normal(0, 1, (3, D))
    r = np.random.default_rng(5)
    router = Linear(r.normal(0, 1, (E, D)), None, out_in=True)
    o = Moe(E, K, normalise=True)
    y0, routing = moe_mlp(x, router, o, experts())
    y1, _ = moe_mlp(x, router, o, experts(), shared=lambda h: 2 * h)
    np.testing.assert_allclose(y1 - y0, 2 * x, rtol=1e-12, atol=1e-12)
    assert routing.top.shape == (3, K)


# transformers' router module of each family is the oracle: same weights, same logits, same choice
def _config(transformers, family: str):
    common = dict(hidden_size=D, num_experts_per_tok=K, num_attention_heads=2, num_hidden_layers=1)
    if family == "mixtral":
        return transformers.MixtralConfig(num_local_experts=E, **common)
    if family in ("qwen3_moe", "olmoe"):
        cls = transformers.Qwen3MoeConfig if family == "qwen3_moe" else transformers.OlmoeConfig
        return cls(num_experts=E, norm_topk_prob=family == "qwen3_moe", **common)
    if family == "gpt_oss":
        return transformers.GptOssConfig(num_local_experts=E, **common)
    if family == "deepseek_v3":
        return transformers.DeepseekV3Config(n_routed_experts=E, n_group=4, topk_group=2, norm_topk_prob=True,
                                             routed_scaling_factor=2.5, **common)  # fmt: skip
    return transformers.Llama4TextConfig(num_local_experts=E, **common)


OURS = {
    "mixtral": dict(router="softmax_topk", normalise=True),
    "qwen3_moe": dict(router="softmax_topk", normalise=True),
    "olmoe": dict(router="softmax_topk", normalise=False),
    "gpt_oss": dict(router="topk_softmax"),
    "deepseek_v3": dict(router="sigmoid_groups", normalise=True, scaling=2.5, groups=4, top_groups=2),
    "llama4_text": dict(router="topk_sigmoid"),
}
MODULES = {
    "mixtral": ("mixtral", "MixtralTopKRouter"),
    "qwen3_moe": ("qwen3_moe", "Qwen3MoeTopKRouter"),
    "olmoe": ("olmoe", "OlmoeTopKRouter"),
    "gpt_oss": ("gpt_oss", "GptOssTopKRouter"),
    "deepseek_v3": ("deepseek_v3", "DeepseekV3TopkRouter"),
    "llama4_text": ("llama4", "Llama4Router"),
}


@pytest.mark.reference
@pytest.mark.parametrize("family", list(OURS))
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_routing_matches_transformers_router_module(family, seed, torch, transformers):
    import importlib

    path, name = MODULES[family]
    cls = getattr(importlib.import_module(f"transformers.models.{path}.modeling_{path}"), name)
    r = np.random.default_rng(seed)
    # float32, as these routers run (Mixtral's softmax is float32 even in a float64 model)
    x = r.normal(0, 1, (11, D)).astype(np.float32)
    W, b, corr = (r.normal(0, s, n).astype(np.float32) for s, n in ((1, (E, D)), (1, E), (0.3, E)))
    module = cls(_config(transformers, family)).float()
    with torch.no_grad():
        module.weight.copy_(torch.tensor(W))
        if family == "gpt_oss":
            module.bias.copy_(torch.tensor(b))
        if family == "deepseek_v3":
            module.e_score_correction_bias.data = torch.tensor(corr)
        out = module(torch.tensor(x))
    if family == "llama4_text":  # (scores [m, E] with -inf -> 0 off the chosen, logits)
        scores = out[0].numpy()
        want_top = np.argsort(-scores, axis=-1, kind="stable")[:, :K]
        want_g = np.take_along_axis(scores, want_top, axis=-1)
    else:
        _, want_g, want_top = (t.numpy() for t in out)
    o = Moe(E, K, **OURS[family])
    z = x @ W.T + (b if family == "gpt_oss" else np.float32(0))
    top, g = route(z, o, corr if family == "deepseek_v3" else None)
    order = np.argsort(want_top, axis=-1)  # DeepSeek's topk is unsorted: compare as sets with their weights
    mine = np.argsort(top, axis=-1)
    np.testing.assert_array_equal(np.take_along_axis(top, mine, -1), np.take_along_axis(want_top, order, -1))
    np.testing.assert_allclose(np.take_along_axis(g, mine, -1), np.take_along_axis(want_g, order, -1),
                               rtol=1e-5, atol=1e-7)  # fmt: skip
    assert g.dtype == np.float32
