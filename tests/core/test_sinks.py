"""Attention sinks (gpt-oss): Softmax([scores, s_j]) with the sink column dropped, for every kernel and every code
path of the vectorized kernel, against a plain NumPy reference written here (and PyTorch, a reference test)."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import build_mask
from kernel_cases import PATHS, qkv, random_mask

from qkv_cli.core.kernels import KERNELS, attention
from qkv_cli.errors import QkvError


def with_sinks(Q, K, V, mask, scale, sinks):  # float64; one head and one row at a time, the column appended
    tau, m, _ = Q.shape
    G, n, _ = V.shape
    r = tau // G
    weights, share = np.zeros((tau, m, n)), np.zeros((tau, m))
    for j in range(tau):
        scores = Q[j].astype(np.float64) @ K[j // r].astype(np.float64).T * scale
        if mask is not None:
            scores = scores + mask
        for i in range(m):
            row = np.append(scores[i], float(sinks[j]))  # [scores, s_j]
            e = np.exp(row - row.max())
            p = e / e.sum()
            weights[j, i], share[j, i] = p[:-1], p[-1]
    out = np.stack([weights[j] @ V[j // r].astype(np.float64) for j in range(tau)])
    return out, weights, share


MASKS = {
    "none": lambda rng, m: None,
    "causal": lambda rng, m: build_mask(m, causal=True),
    "window": lambda rng, m: build_mask(m, window=4),
    "fully-masked-rows": lambda rng, m: random_mask(rng, m, m, empty_rows=(0, 7)),
}


@pytest.mark.parametrize("kernel", list(KERNELS))
@pytest.mark.parametrize("mask_name", list(MASKS))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("path", list(PATHS), indirect=True)
def test_sinks_match_the_appended_column(kernel, mask_name, dtype, path):
    rng = np.random.default_rng(5)
    tau, G, m = 6, 2, 17
    Q, K, V = qkv(rng, tau, G, m, m, dtype=dtype)
    Q *= 2  # peaked rows
    mask = MASKS[mask_name](rng, m)
    sinks = np.array([-3.0, 0.0, 1.5, 4.0, 8.0, -40.0])  # from negligible to most of the row
    out, weights = attention(Q, K, V, mask, kernel=kernel, sinks=sinks)
    want_out, want_w, share = with_sinks(Q, K, V, mask, 1 / np.sqrt(Q.shape[-1]), sinks)
    tol = 2e-6 if dtype == np.float32 else 1e-12
    assert weights.dtype == out.dtype == dtype
    np.testing.assert_allclose(weights, want_w, atol=tol, rtol=tol)
    np.testing.assert_allclose(out, want_out, atol=10 * tol, rtol=10 * tol)
    np.testing.assert_allclose(1 - weights.sum(-1, dtype=np.float64), share, atol=10 * tol)  # the missing mass
    assert (1 - weights.sum(-1)).max() > 0.5  # the sinks matter
    if mask is not None:
        empty = np.all(mask == -np.inf, axis=1)
        assert np.all(weights[:, empty] == 0) and np.all(out[:, empty] == 0)  # a fully masked row: zeros
        assert np.all(weights[:, mask == -np.inf] == 0)


@pytest.mark.parametrize("kernel", list(KERNELS))
@pytest.mark.parametrize("path", ["one-pass", "blocked"], indirect=True)
def test_sinks_with_kept_rows_and_into(kernel, path):
    rng = np.random.default_rng(6)
    Q, K, V = qkv(rng, 4, 2, 20, 20, dtype=np.float64)
    mask, sinks = build_mask(20, causal=True), np.array([0.5, 2.0, -1.0, 3.0])
    _, full = attention(Q, K, V, mask, kernel=kernel, sinks=sinks)
    into = np.zeros((4, 6, 20))
    _, kept = attention(Q, K, V, mask, kernel=kernel, sinks=sinks, rows=(5, 11), into=into)
    assert kept is into
    np.testing.assert_allclose(kept, full[:, 5:11], atol=1e-14)


def test_huge_sinks_and_scores_stay_finite():
    rng = np.random.default_rng(7)
    Q, K, V = qkv(rng, 2, 2, 9, 9, dtype=np.float32)
    for kernel in KERNELS:
        _, w = attention(Q * 1e20, K, V, build_mask(9, causal=True), kernel=kernel, sinks=np.array([1e30, -1e30]))
        assert np.isfinite(w).all() and np.all(w[0] == 0)  # the first head's sink takes every row
        np.testing.assert_allclose(w[1].sum(-1), 1, atol=1e-6)  # the second's takes nothing


@pytest.mark.parametrize(
    "sinks,fragment",
    [(np.zeros(3), "one logit per query head (4,), got shape (3,)"), (np.zeros((4, 1)), "got shape (4, 1)"),
     (np.array([0, 1, np.nan, 2.0]), "finite"), ("abc", "must be numbers")],
)  # fmt: skip
def test_bad_sinks_are_refused(sinks, fragment):
    Q, K, V = qkv(np.random.default_rng(8), 4, 2, 5, 5)
    with pytest.raises(QkvError, match=fragment.replace("(", r"\(").replace(")", r"\)")):
        attention(Q, K, V, sinks=sinks)


@pytest.mark.reference
@pytest.mark.parametrize("kernel", list(KERNELS))
def test_sinks_match_torch(torch, kernel):
    """transformers' gpt-oss eager attention, written in torch: cat([scores + mask, sinks]), softmax, drop."""
    rng = np.random.default_rng(9)
    Q, K, V = qkv(rng, 4, 4, 15, 15, dtype=np.float64)
    sinks = np.array([0.0, 1.0, 2.5, -2.0])
    mask = build_mask(15, window=5)
    _, w = attention(Q, K, V, mask, kernel=kernel, sinks=sinks)
    S = torch.from_numpy(Q) @ torch.from_numpy(K).transpose(1, 2) / np.sqrt(8) + torch.from_numpy(mask)
    combined = torch.cat([S, torch.from_numpy(sinks).reshape(4, 1, 1).expand(4, 15, 1)], dim=-1)
    probs = torch.softmax(combined - combined.max(dim=-1, keepdim=True).values, dim=-1)
    np.testing.assert_allclose(w, probs[..., :-1].numpy(), atol=1e-13)
