"""Shared by the kernel tests: a plain NumPy reference written here, inputs, and the vectorized kernel's code
paths forced on small inputs."""

from __future__ import annotations

import numpy as np
from helpers import allowed_to_additive


def reference(Q, K, V, mask, scale):  # float64, straight from the formula; masked keys left out of the softmax
    tau, m, _ = Q.shape
    G, n, dv = V.shape
    r = tau // G
    weights = np.zeros((tau, m, n))
    for j in range(tau):
        scores = Q[j].astype(np.float64) @ K[j // r].astype(np.float64).T * scale
        if mask is not None:
            scores = scores + mask
        for i in range(m):
            allowed = scores[i] > -np.inf
            if allowed.any():
                e = np.exp(scores[i, allowed] - scores[i, allowed].max())
                weights[j, i, allowed] = e / e.sum()
    out = np.stack([weights[j] @ V[j // r].astype(np.float64) for j in range(tau)])
    return out, weights


# Code paths of the vectorized kernel, forced on small inputs by moving its size thresholds.
PATHS = {
    "one-pass": {},
    "one-pass-threads": {"PARALLEL_BYTES": 0},
    "blocked": {"BLOCKED_BYTES": 0, "PARALLEL_BYTES": 1 << 60, "BLOCK_BYTES": 1, "MAX_BLOCK_ROWS": 8},
    "blocked-threads": {"BLOCKED_BYTES": 0, "PARALLEL_BYTES": 0, "BLOCK_BYTES": 1, "MAX_BLOCK_ROWS": 8},
}


def qkv(rng, tau, G, m, n, dk=8, dv=None, dtype=np.float64):
    Q = rng.standard_normal((tau, m, dk)).astype(dtype)
    K = rng.standard_normal((G, n, dk)).astype(dtype)
    V = rng.standard_normal((G, n, dv or dk)).astype(dtype)
    return Q, K, V


def random_mask(rng, m, n, p=0.6, empty_rows=()):
    allowed = rng.random((m, n)) < p
    allowed[np.arange(min(m, n)), np.arange(min(m, n))] = True
    allowed[list(empty_rows)] = False
    return allowed_to_additive(allowed)


# (name, tau, G, m, n, mask builder)
