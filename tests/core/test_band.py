"""Banded sliding-window attention: equal to the dense kernels on the band, never an m x m array."""

from __future__ import annotations

import tracemalloc
import warnings

import numpy as np
import pytest
from helpers import build_mask
from hypothesis import given, settings
from hypothesis import strategies as st

from qkv_cli.core import band as banded
from qkv_cli.core import vectorized as kernels
from qkv_cli.core.band import band_keys, band_to_dense, band_width, banded_attention
from qkv_cli.core.kernels import KERNELS, attention
from qkv_cli.errors import QkvError


def qkv(rng, tau, G, m, dk=8, dv=6, dtype=np.float64):
    return (
        rng.standard_normal((tau, m, dk)).astype(dtype),
        rng.standard_normal((G, m, dk)).astype(dtype),
        rng.standard_normal((G, m, dv)).astype(dtype),
    )


@pytest.mark.parametrize("kernel", list(KERNELS))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(
    "tau, G, m, window",
    [(2, 2, 30, 4), (4, 2, 50, 7), (3, 1, 9, 1), (2, 2, 12, 12), (2, 2, 10, 99), (2, 1, 150, 70), (1, 1, 1, 3)],
)
def test_band_equals_dense_kernel_on_the_band(kernel, dtype, tau, G, m, window):
    rng = np.random.default_rng(m + window)
    Q, K, V = qkv(rng, tau, G, m, dtype=dtype)
    out, band = banded_attention(Q, K, V, window)
    n_c = min(window, m)
    assert band.shape == (tau, m, n_c) and out.shape == (tau, m, V.shape[-1])
    assert out.dtype == band.dtype == dtype
    dense_out, dense_w = attention(Q, K, V, build_mask(m, window=window, dtype=dtype), kernel=kernel)
    tol = 1e-6 if dtype == np.float32 else 1e-13
    np.testing.assert_allclose(band_to_dense(band), dense_w, atol=tol)
    np.testing.assert_allclose(out, dense_out, atol=10 * tol)
    # the layout: band[j, i, t] is the weight of query i on key i - n_c + 1 + t
    keys = band_keys(m, n_c)
    i, t = np.nonzero(keys >= 0)
    np.testing.assert_allclose(band[:, i, t], dense_w[:, i, keys[i, t]], atol=tol)
    assert np.all(band[:, keys < 0] == 0)  # slots before position 0: weight exactly 0
    np.testing.assert_allclose(band.sum(-1), 1, rtol=1e-5)


def test_band_keys_layout():
    np.testing.assert_array_equal(band_keys(4, 3), [[-1, -1, 0], [-1, 0, 1], [0, 1, 2], [1, 2, 3]])
    assert band_width(10, 4) == 4 and band_width(10, 40) == 10
    with pytest.raises(QkvError):
        band_width(10, 0)


def test_banded_threads_and_blocks(monkeypatch):
    """Small blocks and the threaded path give the same band."""
    rng = np.random.default_rng(1)
    Q, K, V = qkv(rng, 4, 2, 90, dtype=np.float32)
    want = banded_attention(Q, K, V, 16)
    monkeypatch.setattr(banded, "BAND_BLOCK_ROWS", 5)
    monkeypatch.setattr(banded, "PARALLEL_BYTES", 0)
    got = banded_attention(Q, K, V, 16)
    np.testing.assert_allclose(got[1], want[1], atol=1e-6)
    np.testing.assert_allclose(got[0], want[0], atol=1e-5)


@pytest.mark.parametrize("scale", [1e30, 1e-30, 3e38, 1e300, -1e300])
def test_banded_extreme_scales(scale):
    rng = np.random.default_rng(2)
    Q, K, V = qkv(rng, 2, 2, 20, dtype=np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out, band = banded_attention(Q, K, V, 5, scale=scale)
    assert np.all(np.isfinite(out)) and np.all(np.isfinite(band))
    np.testing.assert_allclose(band.sum(-1), 1, rtol=1e-5)
    assert np.all(band[:, band_keys(20, 5) < 0] == 0)


def test_banded_never_allocates_m_by_m():
    """O(m n_c) memory: a 4000-token window-32 run stays far below one m x m float32 matrix."""
    rng = np.random.default_rng(3)
    m, n_c = 4000, 32
    Q, K, V = qkv(rng, 2, 2, m, dk=16, dv=16, dtype=np.float32)
    tracemalloc.start()
    tracemalloc.reset_peak()
    out, band = banded_attention(Q, K, V, n_c)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 1.5 * (band.nbytes + out.nbytes) + 2**20
    assert peak < m * m * 4 / 10


def test_banded_errors():
    rng = np.random.default_rng(4)
    Q, K, V = qkv(rng, 2, 2, 5)
    with pytest.raises(QkvError, match="self-attention"):
        banded_attention(Q, K[:, :4], V[:, :4], 2)
    with pytest.raises(QkvError, match="at least 1"):
        banded_attention(Q, K, V, 0)


@settings(max_examples=40, deadline=None)
@given(
    st.integers(1, 3),
    st.integers(1, 2),
    st.integers(1, 40),
    st.integers(1, 45),
    st.integers(0, 2**32 - 1),
    st.sampled_from([0.1, 1.0, 20.0]),
)
def test_band_property(G, r, m, window, seed, spread):
    rng = np.random.default_rng(seed)
    Q, K, V = qkv(rng, G * r, G, m)
    Q *= spread
    out, band = banded_attention(Q, K, V, window)
    dense_out, dense_w = kernels.vectorized_kernel(Q, K, V, build_mask(m, window=window), 1 / np.sqrt(8))
    np.testing.assert_allclose(band_to_dense(band), dense_w, atol=1e-12)
    np.testing.assert_allclose(out, dense_out, atol=1e-11)
