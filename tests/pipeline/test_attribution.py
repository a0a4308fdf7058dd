"""Attribution beyond the raw weights (pipeline.attribution), each method computed a second, independent way.

- rollout: a 3-token, 2-layer example worked out by hand, and the product of the exported attentions;
- value-norm: from the H, W_v, b_v, W_o that `qkv run --model ... --save-npz` exports, with plain loops;
- value-zeroing: against transformers, rerun with the value row zeroed by a hook (reference), and its properties
  (rows sum to 1, a causal key never moves an earlier query) without torch;
- the loop kernel gives the vectorized numbers, and value zeroing is refused above --max-memory before it runs.
"""

from __future__ import annotations

import numpy as np
import pytest
from clitools import invoke
from tiny import make_checkpoint

from qkv_cli.core.settings import Settings
from qkv_cli.errors import QkvError, TooLargeError
from qkv_cli.pipeline.attribution import fuse, rollout, value_norms, value_vectors
from qkv_cli.pipeline.compute import compute
from qkv_cli.pipeline.request import Request

TEXT = "the cat sat on the mat"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny")
    return {family: make_checkpoint(root / family, family) for family in ("bert", "gpt2")}


def attribute(model, method, **extra):
    settings = Settings(dtype="float64", kernel=extra.pop("kernel", "vectorized"))
    return compute(
        Request.of(text=extra.pop("text", TEXT), model=str(model), method=method, settings=settings, **extra)
    )


# --- rollout ------------------------------------------------------------------------------------------------

# layer 0: head 0 puts everything on token 0, head 1 on itself; layer 1: both heads on token 1
ATT = np.array([[[[1, 0, 0], [1, 0, 0], [1, 0, 0]], np.eye(3)], [[[0, 1, 0]] * 3, [[0, 1, 0]] * 3]], dtype=float)


def test_rollout_worked_by_hand():
    # layer 0: mean = [[1, 0, 0], [.5, .5, 0], [.5, 0, .5]]; A_0 = 0.5 mean + 0.5 I
    A0 = np.array([[1, 0, 0], [0.25, 0.75, 0], [0.25, 0, 0.75]])
    # layer 1: mean = every row on token 1; A_1 = [[.5, .5, 0], [0, 1, 0], [0, .5, .5]]
    # R = A_1 A_0: row 0 = .5 [1, 0, 0] + .5 [.25, .75, 0]; row 2 = .5 [.25, .75, 0] + .5 [.25, 0, .75]
    R = np.array([[5 / 8, 3 / 8, 0], [1 / 4, 3 / 4, 0], [1 / 4, 3 / 8, 3 / 8]])
    np.testing.assert_allclose(rollout(ATT, 0), A0, atol=1e-15)
    np.testing.assert_allclose(rollout(ATT, 1), R, atol=1e-15)


def test_rollout_head_fusion_renormalises_rows():
    # max over the heads of layer 0 = [[1, 0, 0], [1, 1, 0], [1, 0, 1]]; 0.5 max + 0.5 I, row sums 1, 1.5, 1.5
    np.testing.assert_allclose(rollout(ATT, 0, "max"), [[1, 0, 0], [1 / 3, 2 / 3, 0], [1 / 3, 0, 2 / 3]], atol=1e-15)
    # min = [[1, 0, 0], [0, 0, 0], [0, 0, 0]]: rows 1 and 2 keep only the residual, renormalised to I
    np.testing.assert_allclose(rollout(ATT, 0, "min"), np.eye(3), atol=1e-15)
    with pytest.raises(QkvError, match="head-fusion"):
        fuse(ATT[0], "median")


@pytest.mark.parametrize("family", ["bert", "gpt2"])
def test_rollout_is_the_product_of_the_exported_attentions(tiny, family, tmp_path):
    r = invoke(["run", TEXT, "--model", tiny[family], "--save-npz", tmp_path / "run.npz", "--format", "json"])
    assert r.exit_code == 0, r.output
    att = np.load(tmp_path / "run.npz")["attentions"]  # (L, tau, m, m)
    expected = np.eye(att.shape[-1])
    for layer in att:
        A = 0.5 * layer.mean(axis=0) + 0.5 * np.eye(att.shape[-1])
        expected = (A / A.sum(axis=1, keepdims=True)) @ expected
    got = attribute(tiny[family], "rollout")
    np.testing.assert_allclose(got.attribution, expected, atol=1e-12)
    assert got.head_fusion == "mean" and got.attribution_heads is None and got.model.layer == att.shape[0] - 1


# --- value norms --------------------------------------------------------------------------------------------


def norms_by_loops(H, Wv, bv, Wo, weights):
    """f^h(x_j) = (x_j W^h_v + b^h_v) W^h_o, head by head and key by key; the layer's and each head's norms."""
    tau, m, n = weights.shape
    dk = Wv.shape[-1]
    G = Wv.shape[0]
    f = np.zeros((tau, n, Wo.shape[1]))
    for h in range(tau):
        g = h // (tau // G)
        for j in range(n):
            v = H[j] @ Wv[g] + (0 if bv is None else bv[g])
            f[h, j] = v @ Wo[h * dk : (h + 1) * dk]
    layer = np.zeros((m, n))
    heads = np.zeros((tau, m, n))
    for i in range(m):
        for j in range(n):
            layer[i, j] = np.linalg.norm(sum(weights[h, i, j] * f[h, j] for h in range(tau)))
            for h in range(tau):
                heads[h, i, j] = np.linalg.norm(weights[h, i, j] * f[h, j])
    return layer, heads, np.linalg.norm(f, axis=-1)


@pytest.mark.parametrize("family,layer", [("bert", 0), ("bert", 1), ("gpt2", 1)])
def test_value_norms_from_the_exported_weights(tiny, family, layer, tmp_path):
    path = tmp_path / "run.npz"
    r = invoke(["run", TEXT, "--model", tiny[family], "--layer", layer, "--save-npz", path, "--format", "json"])
    assert r.exit_code == 0, r.output
    z = np.load(path)
    expected = norms_by_loops(z["H"], z["Wv"], z["bv"], z["Wo"], z["weights"])
    got = attribute(tiny[family], "value-norm", layers=(layer,))
    for ours, theirs in zip((got.attribution, got.attribution_heads, got.value_norms), expected, strict=True):
        np.testing.assert_allclose(ours, theirs, rtol=1e-10, atol=1e-12)


def test_value_norms_of_random_weights_from_the_export(tmp_path):
    path = tmp_path / "dense.npz"
    args = ["the cat sat on the mat", "--d", "16", "--tau", "4", "--kv-heads", "2", "--causal"]
    assert invoke(["run", *args, "--save-npz", path, "--format", "json"]).exit_code == 0
    z = np.load(path)
    expected = norms_by_loops(z["H"], z["Wv"], None, z["Wo"], z["weights"])
    got = compute(
        Request.of(text=args[0], method="value-norm", settings=Settings(d=16, tau=4, kv_heads=2, causal=True))
    )
    for ours, theirs in zip((got.attribution, got.attribution_heads, got.value_norms), expected, strict=True):
        np.testing.assert_allclose(ours, theirs, rtol=1e-10, atol=1e-12)
    assert (got.attribution[np.triu_indices(6, 1)] == 0).all()  # a masked key moves nothing


def test_value_vectors_blocks_of_W_o():
    rng = np.random.default_rng(0)
    V, Wo = rng.standard_normal((2, 3, 2)), rng.standard_normal((4, 5))  # tau = 2 heads of d_k = 2, d = 5
    F = value_vectors(V, Wo)
    np.testing.assert_allclose(F[1, 2], V[1, 2] @ Wo[2:4])
    layer, heads, norms = value_norms(np.ones((2, 1, 3)) / 3, F)
    np.testing.assert_allclose(layer[0, 0], np.linalg.norm((F[0, 0] + F[1, 0]) / 3))


# --- value zeroing ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("family", ["bert", "gpt2"])
def test_value_zeroing_properties(tiny, family):
    got = attribute(tiny[family], "value-zeroing", layers=(0,))
    S = got.attribution
    np.testing.assert_allclose(S.sum(axis=1), 1, atol=1e-12)
    assert (S >= 0).all() and got.cost["passes"] == S.shape[0] + 1
    if family == "gpt2":  # causal: zeroing key j cannot change queries i < j
        assert (S[np.triu_indices(S.shape[0], 1)] == 0).all()


def zeroed_rerun_scores(torch, model, ids, layer, value_of):
    """1 - cos(y_i, y_i without j), rows normalised, from full transformers reruns with key j's value zeroed."""
    x = torch.tensor([list(ids)])
    with torch.no_grad():
        y = model(x, output_hidden_states=True).hidden_states[layer + 1][0].numpy()
    m = len(ids)
    S = np.zeros((m, m))
    for j in range(m):
        handle = value_of(model, layer).register_forward_hook(lambda mod, inp, out, j=j: zero_value(out, j, model))
        try:
            with torch.no_grad():
                z = model(x, output_hidden_states=True).hidden_states[layer + 1][0].numpy()
        finally:
            handle.remove()
        cos = (y * z).sum(1) / (np.linalg.norm(y, axis=1) * np.linalg.norm(z, axis=1))
        S[:, j] = np.maximum(1 - cos, 0)
    return S / S.sum(axis=1, keepdims=True)


def zero_value(out, j, model):
    out = out.clone()
    if model.config.model_type == "gpt2":  # c_attn gives q, k, v side by side: zero v's row j
        d = model.config.n_embd
        out[0, j, 2 * d :] = 0
    else:  # BERT's value projection
        out[0, j] = 0
    return out


@pytest.mark.reference
def test_value_zeroing_matches_a_transformers_rerun_minilm(torch, transformers, minilm):
    model = transformers.BertModel.from_pretrained(str(minilm), attn_implementation="eager").double().eval()
    got = attribute(minilm, "value-zeroing", text="The cat sat on the mat.", layers=(2,))
    expected = zeroed_rerun_scores(torch, model, got.ids, 2, lambda m, l: m.encoder.layer[l].attention.self.value)
    np.testing.assert_allclose(got.attribution, expected, atol=1e-8)


@pytest.mark.reference
def test_value_zeroing_matches_a_transformers_rerun_gpt2(torch, transformers, gpt2_dir):
    model = transformers.GPT2Model.from_pretrained(str(gpt2_dir), attn_implementation="eager").double().eval()
    got = attribute(gpt2_dir, "value-zeroing", text="The cat sat on the mat.", layers=(0,))
    expected = zeroed_rerun_scores(torch, model, got.ids, 0, lambda m, l: m.h[l].attn.c_attn)
    np.testing.assert_allclose(got.attribution, expected, atol=1e-8)


def test_value_zeroing_is_refused_above_max_memory_before_it_runs(tiny, monkeypatch):
    from qkv_cli.models.model import Model

    def never(*args, **kwargs):
        raise AssertionError("the layer was rerun")

    monkeypatch.setattr(Model, "layer_output", never)
    rollout_fits = attribute(tiny["bert"], "rollout", max_memory=80_000)  # weights (36 KB) and forward fit
    assert rollout_fits.attribution is not None
    with pytest.raises(TooLargeError, match="--method value-zeroing needs about .* more than --max-memory"):
        attribute(tiny["bert"], "value-zeroing", max_memory=80_000)


# --- kernels and errors -------------------------------------------------------------------------------------


@pytest.mark.parametrize("family", ["bert", "gpt2"])
@pytest.mark.parametrize("method", ["rollout", "value-norm", "value-zeroing"])
def test_loop_kernel_gives_the_same_numbers(tiny, family, method):
    a = attribute(tiny[family], method)
    b = attribute(tiny[family], method, kernel="loop")
    np.testing.assert_allclose(b.attribution, a.attribution, atol=1e-12)
    assert b.kernel == "loop"


@pytest.mark.parametrize(
    "request_fields,fragment",
    [
        (dict(method="rollout"), "--method rollout needs --model"),
        (dict(method="value-zeroing"), "--method value-zeroing needs --model"),
        (dict(method="value-norm", head_fusion="max"), "--head-fusion is for --method rollout"),
        (dict(method="saliency"), "unknown --method 'saliency'"),
        (dict(method="value-norm", batch=True), "cannot be combined with --batch"),
    ],
)
def test_bad_requests_are_one_line_errors(request_fields, fragment):
    with pytest.raises(QkvError, match=fragment):
        compute(Request.of(text=TEXT, **request_fields))


def test_one_layer_only(tiny):
    with pytest.raises(QkvError, match="give one --layer"):
        attribute(tiny["bert"], "value-norm", layers=(0, 1))
