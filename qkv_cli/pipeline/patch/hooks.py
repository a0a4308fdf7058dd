"""The intervention points of activation patching, and the two edits a family's block calls at them.

A family's block calls edit(point, value) -> value (models.families: decoder.block, gpt2.block, bert.block;
models.layers.attention for the attention's points):

    "qkv"    (Q [tau, m, d_k], K [G, m, d_k], V [G, m, d_k])   what the scores and the output use (after RoPE)
    "heads"  (z [tau, m, d_k], alpha [tau, m, n], V)  -> z     each head's output z_j = alpha_j V_g(j)
    "attn"   a [m, d]                                          the attention sub-layer's output (after its norm)
    "mlp"    f [m, d]                                          the feed-forward's output (after its norm)

What one patch replaces (one --what, one layer l, one index):

    resid    x_{l+1}[i]          the residual stream leaving block l at position i (HF's hidden_states[l + 1])
    attn     a_l[i], mlp f_l[i]  one position of a sub-layer's output
    heads    z_j                 head j's output, every position
    q        Q^[j]               query head j, every position
    k, v     K^[g], V^[g]        key/value head g, every position: with grouped KV heads (G < tau) the tau / G query
                                 heads j with j // (tau / G) = g all read the patched keys (values)
    pattern  alpha_j             head j's weights, every query: z_j = alpha_j(source) V_g(j)(patched run)

The sub-layer's points are per position; so are the norms after them, so patching before or after a norm is the
same patch. Q and K are patched after QK-norm and RoPE: at one position both are per token and per position, so
this is the same patch as at the projection's output (W^q x) wherever a pair keeps its position (prompts of two
lengths whose common end moves are refused for q and k on RoPE models: pipeline.patch.pairs).

Prompts of two lengths (pipeline.patch.pairs): position i is the i-th pair, source position s_i copied into its
partner t_i; heads, q, k, v copy head j's rows at every pair and leave the unpaired positions as they were.
"""

from __future__ import annotations

import numpy as np

from qkv_cli.core.gqa import kv_heads_of
from qkv_cli.pipeline.patch.names import WHAT as WHAT

BY_POSITION = ("resid", "attn", "mlp")  # layer x position; the others: layer x head (k, v: layer x KV head)
POINT = {"attn": "attn", "mlp": "mlp", "heads": "heads", "pattern": "heads", "q": "qkv", "k": "qkv", "v": "qkv"}


def columns(what: str, m: int, tau: int, G: int) -> int:
    """How many patches one layer holds: positions, heads, or key/value heads."""
    return m if what in BY_POSITION else (G if what in ("k", "v") else tau)


def cache_shape(what: str, m: int, tau: int, G: int, d: int, dk: int) -> tuple[int, ...]:
    """What one layer of the source run keeps for `what` (resid: the run's residual stream, kept by the engine)."""
    return {"attn": (m, d), "mlp": (m, d), "heads": (tau, m, dk), "q": (tau, m, dk), "k": (G, m, dk),
            "v": (G, m, dk), "pattern": (tau, m, m), "resid": (m, d)}[what]  # fmt: skip


class Recorder:
    """An edit that changes nothing and copies, for each layer, what `whats` need (store[what][l])."""

    def __init__(self, whats, n_layers: int):
        self.whats = [w for w in whats if w != "resid"]
        self.store = {w: [None] * n_layers for w in self.whats}
        self.layer = 0

    def __call__(self, point: str, value):
        for w in self.whats:
            if POINT[w] != point:
                continue
            if point in ("attn", "mlp"):
                self.store[w][self.layer] = np.array(value)  # a copy: gpt2 adds the residual into it in place
            elif point == "qkv":
                self.store[w][self.layer] = np.array(value["qkv".index(w)])
            elif w == "heads":
                self.store[w][self.layer] = np.array(value[0])
            else:  # pattern: the weights alpha (tau, m, n)
                self.store[w][self.layer] = np.array(value[1])
        return value[0] if point == "heads" else value

    def missing(self) -> list[str]:
        """The --what whose point the family's block never reached (its attention has no such point)."""
        return [w for w in self.whats if any(x is None for x in self.store[w])]


class Patcher:
    """An edit that replaces index `index` of `what` with the source run's `source` (that layer's cached array).
    pairs (s, t): prompts of two lengths, source position s[k] paired with position t[k] of the run patched."""

    def __init__(self, what: str, index: int, source, pairs=None):
        self.what, self.index, self.source, self.pairs = what, index, source, pairs

    def __call__(self, point: str, value):
        w, i = self.what, self.index
        if POINT[w] != point:
            return value[0] if point == "heads" else value
        if point in ("attn", "mlp"):  # one position
            out = np.array(value)
            s, t = (i, i) if self.pairs is None else (self.pairs[0][i], self.pairs[1][i])
            out[t] = self.source[s]
            return out
        if point == "qkv":
            mats = list(value)
            at = "qkv".index(w)
            mats[at] = np.array(mats[at])
            self._rows(mats[at], i)
            return tuple(mats)
        heads, weights, V = value
        out = np.array(heads)
        if w == "heads":
            self._rows(out, i)
        else:  # z_j = alpha_j(source) V_g(j): (m, n) x (n, d_k) -> (m, d_k)
            g = kv_heads_of(heads.shape[0], V.shape[0])[i]
            out[i] = self.source[i] @ V[g]
        return out

    def _rows(self, out, j):  # head j's rows: every position (one length), or each pair's partner
        if self.pairs is None:
            out[j] = self.source[j]
        else:
            out[j, self.pairs[1]] = self.source[j, self.pairs[0]]
