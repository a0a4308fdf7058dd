"""The pipeline stages without the CLI: a hand-worked example, embeddings, projections, masks, the whole run."""

import math

import numpy as np
import pytest
from helpers import build_mask, window_allowed

from qkv_cli import attention
from qkv_cli.core.embed import embed, sinusoidal_positions, token_embeddings
from qkv_cli.core.projection import combine, concat_heads, init_projections
from qkv_cli.core.settings import Settings
from qkv_cli.errors import QkvError
from qkv_cli.pipeline.seeded import run

E = math.e
P = E / (1 + E)  # softmax([1, 0])[0], worked by hand


def test_hand_worked_two_tokens():
    # Q = K = I, V = [[1, 2], [3, 4]], scale 1: scores = I, softmax rows = [P, 1-P] and [1-P, P]
    Q = np.eye(2)[None]
    V = np.array([[[1.0, 2.0], [3.0, 4.0]]])
    out, weights = attention(Q, Q.copy(), V, scale=1.0)
    assert weights[0] == pytest.approx(np.array([[P, 1 - P], [1 - P, P]]), abs=1e-15)
    assert out[0, 0] == pytest.approx([P * 1 + (1 - P) * 3, P * 2 + (1 - P) * 4], abs=1e-15)


def test_hand_worked_causal_three_tokens():
    # with the causal mask the first query can only see itself; the default scale is 1/sqrt(d_k) = 1/sqrt(2)
    Q = np.array([[[1.0, 1.0], [0.0, 0.0], [2.0, 0.0]]])
    K = np.array([[[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]])
    V = np.array([[[1.0], [10.0], [100.0]]])
    out, weights = attention(Q, K, V, mask=build_mask(3, causal=True))
    assert weights[0, 0] == pytest.approx([1, 0, 0])
    assert weights[0, 1] == pytest.approx([0.5, 0.5, 0])  # q = 0: equal scores over the two allowed keys
    s = 2 / math.sqrt(2)  # q_2 . k_0 = 2, q_2 . k_1 = 0, q_2 . k_2 = 2
    z = 2 * math.exp(s) + 1
    assert weights[0, 2] == pytest.approx([math.exp(s) / z, 1 / z, math.exp(s) / z])
    assert out[0, 2, 0] == pytest.approx((math.exp(s) * 1 + 10 + math.exp(s) * 100) / z)


def test_token_vector_depends_on_token_not_position():
    H = token_embeddings(["the", "cat", "the"], 16, seed=3)
    assert np.array_equal(H[0], H[2])
    assert not np.allclose(H[0], H[1])
    assert not np.allclose(token_embeddings(["the"], 16, seed=4)[0], H[0])


def test_sinusoidal_positions_formula():
    pe = sinusoidal_positions(5, 8)
    assert pe[0, 0::2] == pytest.approx(np.zeros(4)) and pe[0, 1::2] == pytest.approx(np.ones(4))
    assert pe[3, 2] == pytest.approx(math.sin(3 / 10000 ** (2 / 8)))
    assert pe[3, 3] == pytest.approx(math.cos(3 / 10000 ** (2 / 8)))
    H0 = embed(["a", "b"], 8, 0, positions="none")
    H1 = embed(["a", "b"], 8, 0, positions="sinusoidal")
    assert H1 - H0 == pytest.approx(sinusoidal_positions(2, 8))


def test_identity_projection_gives_blocks_of_H():
    Wq, Wk, Wv, Wo = init_projections(8, 2, 0, "identity")
    H = np.arange(24.0).reshape(3, 8)
    assert np.array_equal((H @ Wq)[1], H[:, 4:8])
    assert np.array_equal(Wk, Wq) and np.array_equal(Wv, Wq) and np.array_equal(Wo, np.eye(8))


def test_random_projection_is_glorot_scaled_and_seeded():
    Wq, Wk, _, Wo = init_projections(256, 4, 0)
    assert Wq.shape == (4, 256, 64) and Wo.shape == (256, 256)
    assert Wq.std() == pytest.approx(math.sqrt(2 / (256 + 64)), rel=0.05)
    assert np.array_equal(Wq, init_projections(256, 4, 0)[0])
    assert not np.array_equal(Wq, init_projections(256, 4, 1)[0])
    assert not np.allclose(Wq, Wk)


def test_concat_and_combine():
    heads = np.arange(12.0).reshape(2, 3, 2)  # tau=2, m=3, dk=2
    assert concat_heads(heads)[1].tolist() == [2.0, 3.0, 8.0, 9.0]
    assert combine(heads, np.eye(4)) == pytest.approx(concat_heads(heads))


def test_window_mask_by_hand():
    allowed = window_allowed(4, 2)
    assert allowed.astype(int).tolist() == [[1, 0, 0, 0], [1, 1, 0, 0], [0, 1, 1, 0], [0, 0, 1, 1]]
    assert build_mask(3) is None
    assert build_mask(2, causal=True).tolist() == [[0, -np.inf], [0, 0]]


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_run_matrices_are_consistent(dtype):
    r = run("the cat sat on the mat", Settings(d=16, tau=4, dtype=dtype, causal=True))
    m = 6
    assert r.H.shape == (m, 16) and r.Q.shape == (4, m, 4) and r.weights.shape == (4, m, m)
    for x in (r.H, r.Q, r.scores, r.weights, r.heads, r.output):
        assert x.dtype == np.dtype(dtype)
    tol = 1e-12 if dtype == "float64" else 1e-5
    np.testing.assert_allclose(r.Q, np.einsum("md,tdk->tmk", r.H, r.Wq), atol=tol)
    np.testing.assert_allclose(r.scores, np.einsum("tik,tjk->tij", r.Q, r.K) / 2.0, atol=tol)  # scale 1/sqrt(4)
    np.testing.assert_allclose(r.heads, r.weights @ r.V, atol=tol)
    np.testing.assert_allclose(r.output, np.concatenate(list(r.heads), axis=1) @ r.Wo, atol=tol)
    assert np.all(r.weights[:, np.triu_indices(m, 1)[0], np.triu_indices(m, 1)[1]] == 0)
    np.testing.assert_allclose(r.weights.sum(-1), 1, atol=tol)


def test_run_is_reproducible_and_kernels_agree():
    s = Settings(d=32, tau=4, seed=7, window=3)
    a = run("a b c d e f g", s)
    b = run("a b c d e f g", Settings(d=32, tau=4, seed=7, window=3, kernel="loop"))
    np.testing.assert_allclose(a.weights, b.weights, atol=1e-12)
    np.testing.assert_allclose(a.output, b.output, atol=1e-12)
    assert np.array_equal(a.weights, run("a b c d e f g", s).weights)


def test_identity_projection_attends_to_self():
    # without learned projections q_i . k_i = |h_i|^2 dominates: each token attends mostly to itself
    text = "the quick brown fox jumps over a lazy dog"
    ident = run(text, Settings(d=64, tau=1, projection="identity", positions="none"))
    rand = run(text, Settings(d=64, tau=1, projection="random", positions="none"))
    assert np.diagonal(ident.weights[0]).mean() > 0.9
    assert np.diagonal(rand.weights[0]).mean() < 0.5


def test_sqrt_scale_saturates():
    text = "one two three four five six seven eight"
    weights = {s: run(text, Settings(d=256, tau=1, scale=s)).weights[0] for s in ("auto", "none", "sqrt")}
    peak = {s: w.max(-1).mean() for s, w in weights.items()}
    assert peak["auto"] < peak["none"] < peak["sqrt"]
    assert peak["sqrt"] > 0.99  # one-hot rows: the softmax saturates


@pytest.mark.parametrize(
    "kwargs,fragment",
    [
        ({"d": 500, "tau": 8}, "divisible"),
        ({"d": 4, "tau": 8}, "cannot exceed"),
        ({"d": 0}, "at least 1"),
        ({"tau": -1}, "at least 1"),
        ({"window": 0}, "at least 1"),
        ({"kernel": "fast"}, "vectorized, loop"),
        ({"dtype": "float16"}, "float64, float32"),
        ({"scale": "nan"}, "not finite"),
        ({"scale": "big"}, "auto, none, sqrt"),
        ({"positions": "learned"}, "sinusoidal, none"),
        ({"projection": "zero"}, "random, identity"),
    ],
)
def test_settings_reject(kwargs, fragment):
    with pytest.raises(QkvError, match=fragment):
        Settings(**kwargs)


def test_zero_and_negative_scales_are_experiments():
    r = run("a b c", Settings(d=8, tau=2, scale="0"))
    np.testing.assert_allclose(r.weights, 1 / 3)
    assert np.isfinite(run("a b c", Settings(d=8, tau=2, scale="-2")).weights).all()
