"""Grouped-query attention: tau query heads share G key/value heads; query head j reads key/value head j // (tau/G)."""

from __future__ import annotations


def kv_head_of(j: int, tau: int, G: int) -> int:
    """The key/value head that query head j reads (G = tau: itself)."""
    return j // (tau // G)


def kv_heads_of(tau: int, G: int):  # -> [tau] int: kv_head_of(j) for every query head j
    import numpy as np

    return np.arange(tau) // (tau // G)


def groups(tau: int, G: int) -> list[range]:
    """The query heads of each key/value head: groups[g] = range(g * tau/G, (g + 1) * tau/G)."""
    r = tau // G
    return [range(g * r, (g + 1) * r) for g in range(G)]
