"""erf, GELU and LayerNorm in NumPy: accuracy against math.erf and the formulas."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from qkv_cli.models.layers.basic import gelu, gelu_new, layer_norm
from qkv_cli.models.layers.erf import erf

# --- erf and activations ------------------------------------------------------------------------------


def test_erf_float64_matches_math_erf_to_one_ulp():
    x = np.concatenate([np.linspace(-10, 10, 400_001), [0.84375, 1.25, 1 / 0.35, 6.0, 5.9999999, 1e-300, 3e-8]])
    x = np.concatenate([x, -x, np.nextafter(x, np.inf)])
    ref = np.array([math.erf(v) for v in x])
    got = erf(x)
    assert got.dtype == np.float64
    assert np.all(np.abs(got - ref) <= np.spacing(np.abs(ref)))
    rel = np.abs(got - ref) / np.maximum(np.abs(ref), np.finfo(float).tiny)
    assert rel.max() <= 1e-15


@pytest.mark.parametrize(
    ("x", "expected"),
    [
        (0.0, 0.0),
        (5e-324, 5e-324),
        (1e-310, math.erf(1e-310)),
        (1e-20, math.erf(1e-20)),
        (27.0, 1.0),
        (1e300, 1.0),
        (np.inf, 1.0),
        (-np.inf, -1.0),
    ],
)
def test_erf_extremes(x, expected):
    assert erf(np.array([x]))[0] == expected
    assert erf(np.array([-x]))[0] == -expected


def test_erf_special_values():
    got = erf(np.array([np.nan, -0.0]))
    assert np.isnan(got[0])
    assert got[1] == 0 and np.signbit(got[1])


def test_erf_float32_within_one_float32_ulp():
    x = np.linspace(-6, 6, 200_001, dtype=np.float32)
    ref = np.array([math.erf(v) for v in x.astype(np.float64)])
    got = erf(x)
    assert got.dtype == np.float32
    assert np.all(np.abs(got.astype(np.float64) - ref) <= np.spacing(np.abs(ref).astype(np.float32)))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_erf_keeps_any_memory_layout(dtype):
    x = np.random.default_rng(1).standard_normal((7, 9)).astype(dtype) * 3
    want = erf(np.ascontiguousarray(x))
    for view in (np.asfortranarray(x), x.T.T, x[:, ::2]):
        got = erf(view)
        assert got.shape == view.shape
        np.testing.assert_array_equal(got, want[:, ::2] if view.shape[1] == 5 else want)


def test_erf_shape_and_dtype():
    assert erf(np.zeros((2, 3, 4))).shape == (2, 3, 4)
    assert erf(np.arange(3)).dtype == np.float64
    assert erf(np.float32(0.5)).shape == ()


@settings(max_examples=200, deadline=None)
@given(st.floats(allow_nan=False, allow_infinity=False, width=64))
def test_erf_is_odd_bounded_and_matches_math(v):
    got = erf(np.array([v, -v]))
    assert got[0] == -got[1]
    assert -1 <= got[0] <= 1
    assert abs(got[0] - math.erf(v)) <= np.spacing(abs(math.erf(v)))


def test_erf_is_monotone():
    x = np.linspace(-7, 7, 100_001)
    assert np.all(np.diff(erf(x)) >= 0)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gelu_and_gelu_new_keep_dtype_and_match_formulas(dtype):
    x = np.linspace(-8, 8, 1001).astype(dtype)
    exact = np.array([v * 0.5 * (1 + math.erf(v / math.sqrt(2))) for v in x.astype(float)])
    tanh = np.array(
        [0.5 * v * (1 + math.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v**3))) for v in x.astype(float)]
    )
    tol = 1e-6 if dtype == np.float32 else 1e-14
    assert gelu(x).dtype == dtype and gelu_new(x).dtype == dtype
    np.testing.assert_allclose(gelu(x), exact, atol=tol, rtol=tol)
    np.testing.assert_allclose(gelu_new(x), tanh, atol=tol, rtol=tol)


def test_layer_norm_float32_stays_float32():
    x = np.random.default_rng(0).standard_normal((5, 8)).astype(np.float32)
    y = layer_norm(x, np.ones(8, np.float32), np.zeros(8, np.float32), 1e-12)
    assert y.dtype == np.float32
    np.testing.assert_allclose(y.mean(axis=1), 0, atol=1e-6)
    np.testing.assert_allclose(y.std(axis=1), 1, atol=1e-5)
