"""Every kernel against PyTorch's scaled_dot_product_attention and softmax (reference tests)."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import allowed_to_additive, build_mask
from kernel_cases import qkv, random_mask

from qkv_cli.core.kernels import KERNELS, attention

# ---- reference: PyTorch ---------------------------------------------------------------------------------


def sdpa(torch, Q, K, V, attn_mask=None, **kw):
    t = [torch.from_numpy(x)[None] for x in (Q, K, V)]
    if attn_mask is not None:
        attn_mask = torch.from_numpy(attn_mask)
    return torch.nn.functional.scaled_dot_product_attention(*t, attn_mask=attn_mask, **kw)[0].numpy()


@pytest.mark.reference
@pytest.mark.parametrize("kernel", list(KERNELS))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("kind", ["none", "causal-bool", "causal-additive", "window-bool", "random-additive"])
def test_outputs_match_torch_sdpa(torch, kernel, dtype, kind):
    rng = np.random.default_rng(11)
    m = 40
    Q, K, V = qkv(rng, 4, 4, m, m, dk=16, dtype=dtype)
    if kind == "none":
        mask, torch_mask = None, None
    elif kind.endswith("bool"):
        allowed = np.tril(np.ones((m, m), bool))
        if kind.startswith("window"):
            allowed &= ~np.tril(np.ones((m, m), bool), -6)
        mask, torch_mask = allowed_to_additive(allowed, dtype), allowed  # SDPA: True = may attend
    elif kind.startswith("causal"):
        mask = build_mask(m, causal=True, dtype=dtype)
        torch_mask = mask
    else:
        mask = random_mask(rng, m, m).astype(dtype)
        torch_mask = mask
    out, _ = attention(Q, K, V, mask, kernel=kernel)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(out, sdpa(torch, Q, K, V, torch_mask), atol=tol, rtol=tol)


@pytest.mark.reference
@pytest.mark.parametrize("kernel", list(KERNELS))
@pytest.mark.parametrize("causal", [False, True])
def test_gqa_matches_torch_sdpa_enable_gqa(torch, kernel, causal):
    rng = np.random.default_rng(12)
    Q, K, V = qkv(rng, 8, 2, 33, 33, dk=16, dtype=np.float32)
    out, _ = attention(Q, K, V, build_mask(33, causal=causal, dtype=np.float32), kernel=kernel)
    want = sdpa(torch, Q, K, V, is_causal=causal, enable_gqa=True)
    np.testing.assert_allclose(out, want, atol=1e-5, rtol=1e-5)


@pytest.mark.reference
@pytest.mark.parametrize("kernel", list(KERNELS))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("causal", [False, True])
def test_weights_match_torch_softmax(torch, kernel, dtype, causal, path):
    rng = np.random.default_rng(13)
    m, n = 37, 37
    Q, K, V = qkv(rng, 3, 3, m, n, dk=16, dtype=dtype)
    mask = build_mask(m, causal=causal, dtype=dtype)
    _, weights = attention(Q, K, V, mask, kernel=kernel)
    scores = torch.from_numpy(Q) @ torch.from_numpy(K).transpose(-1, -2) / 4.0
    if mask is not None:
        scores = scores + torch.from_numpy(mask)
    tol = 1e-6 if dtype == np.float32 else 1e-13
    np.testing.assert_allclose(weights, torch.softmax(scores, dim=-1).numpy(), atol=tol, rtol=1e-5)
