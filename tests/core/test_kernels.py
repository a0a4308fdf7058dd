"""The kernel contract, for every kernel in KERNELS and every code path of the vectorized kernel.

A plain NumPy reference (kernel_cases.reference: float64, one head and one row at a time) is the yardstick;
hypothesis checks the invariants. The PyTorch comparisons are in test_kernels_torch.py.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from helpers import allowed_to_additive, build_mask, chunk_allowed
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kernel_cases import PATHS, qkv, random_mask, reference

from qkv_cli.core import threads
from qkv_cli.core import vectorized as kernels
from qkv_cli.core.kernels import KERNELS, attention, get_kernel
from qkv_cli.core.numerics import softmax
from qkv_cli.errors import QkvError

CASES = [
    ("none", 2, 2, 19, 19, lambda rng, m, n: None),
    ("causal", 2, 2, 19, 19, lambda rng, m, n: build_mask(m, causal=True)),
    ("causal-cross", 2, 2, 13, 21, lambda rng, m, n: build_mask(m, n, causal=True)),
    ("window", 2, 2, 23, 23, lambda rng, m, n: build_mask(m, window=5)),
    ("random", 2, 2, 17, 17, lambda rng, m, n: random_mask(rng, m, n)),
    ("random-cross", 2, 2, 9, 30, lambda rng, m, n: random_mask(rng, m, n)),
    ("fully-masked-rows", 2, 2, 17, 17, lambda rng, m, n: random_mask(rng, m, n, empty_rows=(0, 5, 16))),
    ("gqa-causal", 6, 2, 18, 18, lambda rng, m, n: build_mask(m, causal=True)),
    ("mqa-window", 4, 1, 20, 20, lambda rng, m, n: build_mask(m, window=7)),
    ("gqa-chunked", 4, 2, 22, 22, lambda rng, m, n: allowed_to_additive(chunk_allowed(m, 5))),
    ("bias-and-inf", 2, 2, 16, 16, lambda rng, m, n: random_mask(rng, m, n) + rng.standard_normal((m, n))),
]


@pytest.mark.parametrize("kernel", list(KERNELS))
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_kernel_matches_reference(kernel, case, dtype, path):
    _, tau, G, m, n, make_mask = case
    rng = np.random.default_rng(len(case[0]))
    Q, K, V = qkv(rng, tau, G, m, n, dtype=dtype)
    mask = make_mask(rng, m, n)
    out, weights = attention(Q, K, V, mask, kernel=kernel)
    want_out, want_w = reference(Q, K, V, mask, 1 / np.sqrt(Q.shape[-1]))
    assert out.dtype == weights.dtype == dtype
    assert out.shape == (tau, m, V.shape[-1]) and weights.shape == (tau, m, n)
    tol = 2e-6 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(weights, want_w, atol=tol, rtol=tol)
    np.testing.assert_allclose(out, want_out, atol=10 * tol, rtol=10 * tol)
    if mask is not None:
        assert np.all(weights[:, mask == -np.inf] == 0)  # exactly 0, not just small
        empty = np.all(mask == -np.inf, axis=1)
        assert np.all(weights[:, empty] == 0) and np.all(out[:, empty] == 0)


@pytest.mark.parametrize("kernel", list(KERNELS))
@pytest.mark.parametrize("case", CASES[1:4] + CASES[6:8], ids=[c[0] for c in CASES[1:4] + CASES[6:8]])
def test_weights_written_into_the_callers_array(kernel, case, path):
    """into (a model's zero-filled slot for the layer) becomes the weights: the same numbers, bit for bit."""
    _, tau, G, m, n, make_mask = case
    rng = np.random.default_rng(3)
    Q, K, V = qkv(rng, tau, G, m, n, dtype=np.float32)
    mask = make_mask(rng, m, n)
    out, weights = attention(Q, K, V, mask, kernel=kernel)
    slots = np.zeros((2, tau, m, n), dtype=np.float32)
    out2, weights2 = attention(Q, K, V, mask, kernel=kernel, into=slots[1])
    assert np.shares_memory(weights2, slots[1])
    np.testing.assert_array_equal(slots[1], weights)
    np.testing.assert_array_equal(out2, out)
    assert not slots[0].any()
    with pytest.raises(QkvError, match="into must be"):
        attention(Q, K, V, mask, kernel=kernel, into=slots[1, :, 1:])
    with pytest.raises(QkvError, match="into must be"):
        attention(Q, K, V, mask, kernel=kernel, into=slots[1].astype(np.float64))
    with pytest.raises(QkvError, match="into must be a row-major"):  # a reshape of it would be a copy
        attention(Q, K, V, mask, kernel=kernel, into=np.zeros((n, m, tau), dtype=np.float32).T)


@pytest.mark.parametrize("kernel", list(KERNELS))
def test_float32_mask_dtype_mix(kernel):
    """A float64 mask (masks.build_mask's default) with float32 inputs: float32 out, same values."""
    rng = np.random.default_rng(3)
    Q, K, V = qkv(rng, 2, 2, 12, 12, dtype=np.float32)
    out32, w32 = attention(Q, K, V, build_mask(12, causal=True, dtype=np.float32), kernel=kernel)
    out64, w64 = attention(Q, K, V, build_mask(12, causal=True, dtype=np.float64), kernel=kernel)
    assert out64.dtype == w64.dtype == np.float32
    np.testing.assert_array_equal(w32, w64)
    np.testing.assert_array_equal(out32, out64)


@pytest.mark.parametrize("kernel", list(KERNELS))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("scale", [1e30, 1e-30, 3e38, -1e30, 1e300, -1e300, 1e-300])
@pytest.mark.parametrize("masked", [False, True])
def test_extreme_scales_never_give_nan_or_inf(kernel, dtype, scale, masked, path):
    rng = np.random.default_rng(4)
    Q, K, V = qkv(rng, 2, 2, 10, 10, dtype=dtype)
    mask = random_mask(rng, 10, 10, empty_rows=(3,)) if masked else None
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # not even a RuntimeWarning
        out, weights = attention(Q, K, V, mask, scale=scale, kernel=kernel)
    assert out.dtype == weights.dtype == dtype
    assert np.all(np.isfinite(out)) and np.all(np.isfinite(weights))
    allowed = np.ones((10, 10), bool) if mask is None else mask > -np.inf
    assert np.all(weights[:, ~allowed] == 0)
    sums = weights.sum(-1)
    np.testing.assert_allclose(sums[:, allowed.any(1)], 1, rtol=1e-5)
    assert np.all(sums[:, ~allowed.any(1)] == 0)
    if abs(scale) < 1:  # tiny scale: uniform over the allowed keys
        want = allowed / np.maximum(allowed.sum(1, keepdims=True), 1)
        np.testing.assert_allclose(weights, np.broadcast_to(want, weights.shape), atol=1e-6)
    elif 0 < scale < 1e35:  # huge scale: all weight on the best allowed key (the reference agrees)
        np.testing.assert_allclose(weights, reference(Q, K, V, mask, scale)[1], atol=1e-6)


@pytest.mark.parametrize("kernel", list(KERNELS))
def test_overflowing_inputs_give_finite_weights(kernel):
    """Scores beyond float32 range (+inf after scaling) still give a finite softmax: the largest scores win."""
    Q = np.full((1, 3, 4), 1e19, dtype=np.float32)
    K = np.array([[[1e19] * 4, [-1e19] * 4, [1e19] * 4]], dtype=np.float32)
    V = np.eye(3, 4, dtype=np.float32)[None]
    out, weights = attention(Q, K, V, scale="none", kernel=kernel)
    assert np.all(np.isfinite(out)) and np.all(np.isfinite(weights))
    np.testing.assert_allclose(weights[0], [[0.5, 0, 0.5]] * 3)


def test_kernels_agree_on_a_large_input():
    """One input large enough for the real thresholds: blocked, planned, threaded."""
    rng = np.random.default_rng(5)
    Q, K, V = qkv(rng, 4, 2, 700, 700, dk=16, dtype=np.float32)
    mask = build_mask(700, causal=True, dtype=np.float32)
    assert Q.shape[0] * 700 * 700 * 4 > kernels.BLOCKED_BYTES
    out, weights = attention(Q, K, V, mask)
    want_out, want_w = reference(Q, K, V, mask, 0.25)
    np.testing.assert_allclose(weights, want_w, atol=2e-6)
    np.testing.assert_allclose(out, want_out, atol=2e-5)


# ---- hypothesis: invariants -----------------------------------------------------------------------------


@st.composite
def problems(draw):
    G = draw(st.integers(1, 3))
    tau = G * draw(st.integers(1, 3))
    m = draw(st.integers(1, 12))
    n = draw(st.integers(1, 12))
    dk = draw(st.integers(1, 6))
    seed = draw(st.integers(0, 2**32 - 1))
    allowed = draw(st.lists(st.lists(st.booleans(), min_size=n, max_size=n), min_size=m, max_size=m))
    dtype = draw(st.sampled_from([np.float32, np.float64]))
    spread = draw(st.sampled_from([0.1, 1.0, 10.0]))
    rng = np.random.default_rng(seed)
    Q, K, V = qkv(rng, tau, G, m, n, dk=dk, dtype=dtype)
    Q *= dtype(spread)
    mask = allowed_to_additive(np.array(allowed, dtype=bool).reshape(m, n))
    return Q, K, V, mask


SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(problems(), st.sampled_from(list(PATHS)))
def test_rows_sum_to_one_over_allowed_keys_and_masked_weights_are_zero(problem, path_name):
    Q, K, V, mask = problem
    with pytest.MonkeyPatch.context() as mp:
        for name, value in PATHS[path_name].items():
            mp.setattr(kernels, name, value)
        for kernel in KERNELS:
            out, weights = attention(Q, K, V, mask, kernel=kernel)
            allowed = mask > -np.inf
            assert np.all(weights[:, ~allowed] == 0)
            assert np.all(weights >= 0)
            sums = weights.sum(-1)
            np.testing.assert_allclose(sums[:, allowed.any(1)], 1, rtol=1e-5)
            assert np.all(sums[:, ~allowed.any(1)] == 0)
            assert np.all(np.isfinite(out))


@SETTINGS
@given(problems(), st.sampled_from(list(PATHS)))
def test_kernels_agree(problem, path_name):
    Q, K, V, mask = problem
    with pytest.MonkeyPatch.context() as mp:
        for name, value in PATHS[path_name].items():
            mp.setattr(kernels, name, value)
        results = [attention(Q, K, V, mask, kernel=kernel) for kernel in KERNELS]
    tol = 1e-5 if Q.dtype == np.float32 else 1e-12
    for out, weights in results[1:]:
        np.testing.assert_allclose(weights, results[0][1], atol=tol)
        np.testing.assert_allclose(out, results[0][0], atol=10 * tol * max(1, np.abs(V).max()))


@SETTINGS
@given(problems(), st.floats(-30, 30), st.data())
def test_adding_a_constant_to_a_row_of_scores_changes_nothing(problem, c, data):
    Q, K, V, mask = problem
    i = data.draw(st.integers(0, Q.shape[1] - 1))
    shifted = mask.copy()
    shifted[i] += c  # -inf stays -inf
    for kernel in KERNELS:
        out, weights = attention(Q, K, V, mask, kernel=kernel)
        out2, weights2 = attention(Q, K, V, shifted, kernel=kernel)
        tol = 1e-5 if Q.dtype == np.float32 else 1e-11
        np.testing.assert_allclose(weights2, weights, atol=tol)
        np.testing.assert_allclose(out2, out, atol=10 * tol * max(1, np.abs(V).max()))


# ---- smaller contracts ----------------------------------------------------------------------------------


def test_softmax_all_masked_row_and_inf():
    x = np.array([[0.0, 1.0, -np.inf], [-np.inf, -np.inf, -np.inf], [np.inf, 0.0, np.inf]])
    y = softmax(x)
    assert np.all(np.isfinite(y))
    np.testing.assert_allclose(y.sum(-1), [1, 0, 1])
    np.testing.assert_allclose(y[2], [0.5, 0, 0.5])


@pytest.mark.parametrize("kernel", list(KERNELS))
@pytest.mark.parametrize("m, n", [(0, 5), (5, 0), (0, 0)])
def test_empty_inputs(kernel, m, n):
    rng = np.random.default_rng(14)
    Q, K, V = qkv(rng, 2, 1, m, n, dtype=np.float32)
    out, weights = attention(Q, K, V, kernel=kernel)
    assert out.shape == (2, m, 8) and weights.shape == (2, m, n) and out.dtype == np.float32
    assert not out.any()


def test_unknown_kernel_lists_valid_ones():
    with pytest.raises(QkvError, match="vectorized"):
        get_kernel("fast")


def test_runs_without_threadpoolctl(monkeypatch):
    """threadpoolctl is a test/bench extra: without it the threaded path runs on the calling thread."""
    monkeypatch.setattr(threads, "_blas", False)
    monkeypatch.setattr(kernels, "PARALLEL_BYTES", 0)
    rng = np.random.default_rng(10)
    Q, K, V = qkv(rng, 4, 4, 9, 9)
    mask = build_mask(9, causal=True)
    np.testing.assert_allclose(attention(Q, K, V, mask)[1], reference(Q, K, V, mask, 1 / np.sqrt(8))[1])


def test_worker_errors_reach_the_caller(monkeypatch):
    monkeypatch.setattr(kernels, "PARALLEL_BYTES", 0)

    def work(task):
        if task == 3:
            raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        threads.run_tasks(list(range(6)), work, parallel=True)
