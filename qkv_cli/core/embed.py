"""H (m x d): a vector per token string (seeded, independent of position) plus sinusoidal positions."""

from __future__ import annotations

import hashlib

import numpy as np


def token_vector(token: str, d: int, seed: int):  # -> [d]
    """The same token string always gets the same N(0, 1) vector for a given seed."""
    digest = hashlib.blake2b(f"{seed}\x00{token}".encode(), digest_size=8).digest()
    return np.random.default_rng(int.from_bytes(digest, "little")).standard_normal(d)


def token_embeddings(tokens, d: int, seed: int, dtype=np.float64):  # m strings -> [m, d]
    cache: dict[str, np.ndarray] = {}
    H = np.empty((len(tokens), d), dtype=dtype)
    for i, token in enumerate(tokens):
        if token not in cache:
            cache[token] = token_vector(token, d, seed)
        H[i] = cache[token]
    return H


def sinusoidal_positions(m: int, d: int, dtype=np.float64):  # -> [m, d]
    """PE(p, 2i) = sin(p / 10000^(2i/d)), PE(p, 2i+1) = cos(p / 10000^(2i/d))."""
    positions = np.arange(m, dtype=np.float64)[:, None]
    rates = 1.0 / 10000.0 ** (np.arange(0, d, 2, dtype=np.float64) / d)
    pe = np.zeros((m, d), dtype=np.float64)
    pe[:, 0::2] = np.sin(positions * rates)
    pe[:, 1::2] = np.cos(positions * rates[: d // 2])
    return pe.astype(dtype, copy=False)


def embed(tokens, d: int, seed: int, positions: str = "sinusoidal", dtype=np.float64):  # -> H [m, d]
    H = token_embeddings(tokens, d, seed, dtype)
    if positions == "sinusoidal":
        H += sinusoidal_positions(len(tokens), d, dtype)
    return H
