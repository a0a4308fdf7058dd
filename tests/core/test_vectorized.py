"""The vectorized kernel's mask planner: causal and banded fast paths, taken exactly when the mask allows them."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import build_mask
from kernel_cases import PATHS, qkv, random_mask, reference

from qkv_cli.core import vectorized as kernels
from qkv_cli.core.kernels import attention
from qkv_cli.core.vectorized import plan_blocks

# ---- the mask planner: causal and banded fast paths, taken exactly when the mask allows them --------------


def spy_on_plans(monkeypatch):
    plans = []
    real = kernels.plan_blocks

    def spy(*args):
        plans.append(real(*args))
        return plans[-1]

    monkeypatch.setattr(kernels, "plan_blocks", spy)
    for name, value in PATHS["blocked-threads"].items():
        monkeypatch.setattr(kernels, name, value)
    return plans


def test_causal_fast_path_taken_for_a_dense_causal_matrix(monkeypatch):
    plans = spy_on_plans(monkeypatch)
    m = 64
    rng = np.random.default_rng(6)
    Q, K, V = qkv(rng, 2, 2, m, m)
    mask = build_mask(m, causal=True)
    out, weights = attention(Q, K, V, mask)
    (plan,) = plans
    for b in plan:
        assert (b.c0, b.c1) == (0, b.i1)  # the upper triangle right of the diagonal block is never computed
        assert all(a0 >= b.i0 for a0, _ in b.adds)  # the mask is added on the diagonal block only
    computed = sum((b.i1 - b.i0) * (b.c1 - b.c0) for b in plan)
    assert computed < 0.6 * m * m
    want_out, want_w = reference(Q, K, V, mask, 1 / np.sqrt(8))
    np.testing.assert_allclose(weights, want_w, atol=1e-12)
    np.testing.assert_allclose(out, want_out, atol=1e-12)


@pytest.mark.parametrize(
    "where, value, check",
    [
        ((40, 3), -np.inf, "adds"),  # one more masked key below the diagonal: that block adds the whole mask
        ((10, 50), 0.0, "width"),  # one more allowed key above the diagonal: that block computes every column
        ((20, 3), np.nan, "adds"),  # a NaN where the planner expects 0: never skipped
        ((5, 30), -1e30, "width"),  # finite but not -inf above the diagonal: computed
    ],
)
def test_causal_fast_path_not_taken_for_a_near_causal_matrix(monkeypatch, where, value, check):
    plans = spy_on_plans(monkeypatch)
    m = 64
    rng = np.random.default_rng(7)
    Q, K, V = qkv(rng, 2, 2, m, m)
    mask = build_mask(m, causal=True)
    mask[where] = value
    out, weights = attention(Q, K, V, mask)
    (plan,) = plans
    (hit,) = [b for b in plan if b.i0 <= where[0] < b.i1]
    if check == "adds":
        assert hit.adds == ((hit.c0, hit.c1),)
    else:
        assert (hit.c0, hit.c1) == (0, m)
    assert all(b.c1 == b.i1 for b in plan if b is not hit)  # the other blocks still skip
    if not np.isnan(value):
        want_out, want_w = reference(Q, K, V, mask, 1 / np.sqrt(8))
        np.testing.assert_allclose(weights, want_w, atol=1e-12)
        np.testing.assert_allclose(out, want_out, atol=1e-12)


def test_window_fast_path_computes_only_a_band_of_blocks(monkeypatch):
    plans = spy_on_plans(monkeypatch)
    m, n_c = 80, 10
    rng = np.random.default_rng(8)
    Q, K, V = qkv(rng, 2, 2, m, m)
    mask = build_mask(m, window=n_c)
    _, weights = attention(Q, K, V, mask)
    (plan,) = plans
    for b in plan:
        assert b.c0 == max(0, b.i0 - n_c + 1) and b.c1 == b.i1
    np.testing.assert_allclose(weights, reference(Q, K, V, mask, 1 / np.sqrt(8))[1], atol=1e-12)


def test_plan_without_mask_and_with_unstructured_mask():
    assert all((b.c0, b.c1, b.adds) == (0, 30, ()) for b in plan_blocks(None, 20, 30, 8))
    rng = np.random.default_rng(9)
    mask = random_mask(rng, 20, 30)
    mask[0] = -np.inf  # an empty first row: nothing to guess from
    assert all((b.c0, b.c1, b.adds) == (0, 30, ((0, 30),)) for b in plan_blocks(mask, 20, 30, 8))


@pytest.mark.parametrize("path_name", list(PATHS))
def test_strided_inputs_give_the_numbers_of_their_row_major_copies(monkeypatch, path_name):
    for name, value in PATHS[path_name].items():
        monkeypatch.setattr(kernels, name, value)
    rng = np.random.default_rng(11)
    Q, K, V = (x[..., ::2] for x in qkv(rng, 4, 2, 21, 21, dk=16))  # every other column: no unit stride
    mask = build_mask(21, causal=True)
    out, weights = attention(Q, K, V, mask)
    want_out, want_w = reference(Q, K, V, mask, 1 / np.sqrt(8))
    np.testing.assert_allclose(weights, want_w, atol=1e-12)
    np.testing.assert_allclose(out, want_out, atol=1e-12)


@pytest.mark.parametrize("path_name", list(PATHS))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_kept_rows_equal_the_reference_rows_on_every_path(monkeypatch, path_name, dtype):
    for name, value in PATHS[path_name].items():
        monkeypatch.setattr(kernels, name, value)
    rng = np.random.default_rng(12)
    Q, K, V = qkv(rng, 6, 2, 40, 40, dtype=dtype)
    mask = build_mask(40, causal=True)
    out, kept = attention(Q, K, V, mask, rows=(7, 33))  # blocks of 8 rows: kept rows start and end mid-block
    want_out, want_w = reference(Q, K, V, mask, 1 / np.sqrt(8))
    tol = 2e-6 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(kept, want_w[:, 7:33], atol=tol)
    np.testing.assert_allclose(out, want_out, atol=10 * tol)
