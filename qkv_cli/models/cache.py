"""A KV cache in NumPy: the keys and values of every token seen so far, per layer, so that a new token costs one
query row against them -- O(n) per step instead of recomputing the whole O(n^2) forward pass.

    step t:  x_t -> for each layer: q_t, k_t, v_t (RoPE at position t);  K_l <- [K_l; k_t], V_l <- [V_l; v_t]
             alpha_t = Softmax(q_t K_l^T * scale + Mask_t)   (causal; the window on sliding layers)

The cache holds K after RoPE (what the scores use), (G, n, d_k) per layer: 2 L G d_k numbers per token. With
multi-head latent attention (models.layers.mla) it holds each token's latent and RoPE key: L (r_kv + d_rope) numbers.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from qkv_cli.errors import QkvError


class LayerCache:
    """One layer's keys and values, preallocated for `capacity` tokens."""

    def __init__(self, G: int, capacity: int, d_k: int, dtype):
        self.K = np.empty((G, capacity, d_k), dtype=dtype)
        self.V = np.empty((G, capacity, d_k), dtype=dtype)
        self.length = 0

    def append(self, K, V):  # [G, m, dk] new keys and values -> every key and value so far (views)
        start, end = self.length, self.length + K.shape[1]
        if end > self.K.shape[1]:
            raise QkvError(f"the KV cache holds {self.K.shape[1]} tokens: no room for {end}")
        self.K[:, start:end], self.V[:, start:end] = K, V
        self.length = end
        return self.K[:, :end], self.V[:, :end]

    @property
    def nbytes(self) -> int:
        return self.K[:, : self.length].nbytes + self.V[:, : self.length].nbytes


@dataclass
class Step:
    """What one call of `step` computed for its new tokens."""

    hidden: np.ndarray  # (m, d) after the final norm
    logits: np.ndarray | None  # (1, V): the last new token's next-token scores; None for an encoder
    attentions: list  # per layer (tau, m, n): each new token's weights over every token so far


class KVCache:
    def __init__(self, model, capacity: int):
        c = model.config
        self.capacity = capacity
        self.layers = [layer_cache(c, capacity, model.dtype) for _ in range(c.n_layers)]

    @property
    def length(self) -> int:
        return self.layers[0].length

    @property
    def nbytes(self) -> int:
        """Bytes the filled part holds (K and V, every layer)."""
        return sum(lc.nbytes for lc in self.layers)


def layer_cache(c, capacity: int, dtype):
    """A layer's cache: K and V (G, n, d_k), or with multi-head latent attention the latent and the RoPE key."""
    if getattr(c, "latent", None) is not None:
        from qkv_cli.models.layers.mla import LatentCache

        return LatentCache(c.latent, capacity, dtype)
    return LayerCache(c.n_kv_heads, capacity, c.d_k, dtype)


def stale_at(config) -> int | None:
    """The cache length at which its keys no longer fit the next token: LongRoPE (Phi-3) turns by its short factors
    up to original_max_position_embeddings tokens and by its long ones beyond, so the keys cached before the switch
    are recomputed once there, as transformers' Phi-3 generation drops its cache at that length."""
    positions = getattr(config, "rope", None)
    ropes = getattr(positions, "ropes", {}) or {}
    switch = {r.original_max_positions for r in ropes.values() if r.kind == "longrope"}
    return min(switch) if switch else None


def bytes_needed(config, capacity: int, itemsize: int) -> int:
    if getattr(config, "latent", None) is not None:  # MLA: r_kv + d_rope numbers per token and layer
        return config.n_layers * capacity * config.latent.cached * itemsize
    return 2 * config.n_layers * config.n_kv_heads * capacity * config.d_k * itemsize


def step(model, ids, cache: KVCache, kernel: str = "vectorized") -> Step:
    """Run the new tokens `ids` (positions cache.length ..) through every layer, appending to the cache."""
    from qkv_cli.models.model import check_finite, layer_masks

    c, fam, p = model.config, model.family, model.params
    ids = np.asarray(ids, dtype=np.int64).reshape(-1)
    start, m = cache.length, ids.size
    if start + m > c.max_positions:
        raise QkvError(f"{start + m} tokens is more than {model.name} accepts ({c.max_positions}, {c.positions_key})")
    x = fam.embed(p, c, ids, start)
    rows = []
    for layer, mask in enumerate(layer_masks(fam, c, m, start + m, model.dtype, offset=start)):
        x, parts = fam.block(p, c, layer, x, mask, kernel, cache.layers[layer], start)
        check_finite(x, layer, model.name)
        rows.append(parts.weights)
    h = fam.final(p, c, x)
    return Step(h, fam.logits(p, c, h[-1:]), rows)  # the next token's scores: the last row only (not P x V)
