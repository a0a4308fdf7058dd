"""Multi-head latent attention (MLA; DeepSeek-V2, section 2.1, as DeepSeek-V3 uses it): every head's keys and values
are decompressed from one latent vector per token, and the position enters through a RoPE key shared by all heads.

    c^Q = N_q(H W^DQ)                        (m, r_q)            the queries' latent (q_lora_rank; absent: Q = H W^Q)
    [Q^C_j | Q^R_j] = c^Q W_j^UQ             (m, d_nope + d_rope) head j's content and RoPE parts
    [c^KV | k^R] = H W^DKV                   (m, r_kv + d_rope)   the latent (kv_lora_rank), the shared RoPE key
    [K^C_j | V_j] = N_kv(c^KV) W_j^UKV       (m, d_nope + d_v)    head j's keys and values, from the latent alone
    Q_j = [Q^C_j | RoPE(Q^R_j)],  K_j = [K^C_j | RoPE(k^R)]      width d_k = d_nope + d_rope (192 in DeepSeek-V3)
    head_j = Softmax(Q_j K_j^T * scale + Mask) V_j               V width d_v (128), not d_k
    output = concat(head_1..head_tau) W^O

so one score is q^C . k^C + q^R . k^R: what a key says (the nope part) and where it is (the rope part). scale is
1/sqrt(d_k), times mscale^2 = (0.1 mscale_all_dim ln(factor) + 1)^2 under YaRN. The KV cache holds N_kv(c^KV) and
RoPE(k^R): r_kv + d_rope numbers per token and layer (576 in DeepSeek-V3), against 2 tau d_k for multi-head
attention with the same heads; K and V are decompressed from it at every step.

DeepSeek's checkpoints lay the RoPE dimensions out as interleaved pairs (x0, x1), (x2, x3) ... (`rope_interleave`):
qkv reorders those rows of W^UQ and W^DKV once at load into halves [x0, x2, .. | x1, x3, ..], the layout of
`rotate_half`, so the one RoPE of models.layers.rope turns them (transformers' rotation gives the same layout).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from qkv_cli.core.kernels import attention
from qkv_cli.errors import QkvError
from qkv_cli.models.layers.attention import Attended, Hooks
from qkv_cli.models.layers.basic import Linear

LATENT_NORM_EPS = 1e-6  # N_q and N_kv: transformers builds them with RMSNorm's default, not rms_norm_eps


@dataclass(frozen=True)
class Latent:
    """MLA's widths, by config.json's names; checked at construction."""

    q_rank: int | None  # r_q, q_lora_rank (None: the queries come from one matrix W^Q)
    kv_rank: int  # r_kv, kv_lora_rank
    d_nope: int  # qk_nope_head_dim: the content part of a query or key
    d_rope: int  # qk_rope_head_dim: the RoPE part
    d_v: int  # v_head_dim
    interleaved: bool = True  # rope_interleave: the checkpoint's RoPE rows are pairs (x0, x1), (x2, x3) ...

    def __post_init__(self):
        for key, value in (("q_lora_rank", self.q_rank), ("kv_lora_rank", self.kv_rank),
                           ("qk_nope_head_dim", self.d_nope), ("qk_rope_head_dim", self.d_rope),
                           ("v_head_dim", self.d_v)):  # fmt: skip
            if value is None and key == "q_lora_rank":
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise QkvError(f"'{key}' must be a positive integer, got {value!r}")
        if self.d_rope % 2:
            raise QkvError(f"'qk_rope_head_dim' must be even (RoPE turns pairs of dimensions), got {self.d_rope}")
        if not isinstance(self.interleaved, bool):
            raise QkvError(f"'rope_interleave' must be true or false, got {self.interleaved!r}")

    @property
    def d_k(self) -> int:  # the width of q . k
        return self.d_nope + self.d_rope

    @property
    def cached(self) -> int:  # numbers a KV cache holds per token and layer: c^KV and k^R
        return self.kv_rank + self.d_rope


@dataclass
class LatentWeights:
    """One layer's MLA parameters, as the checkpoint stores them (PyTorch Linear: (d_out, d_in))."""

    q_a: Linear | None  # W^DQ: d -> r_q (None: q_b is W^Q, d -> tau d_k)
    q_norm: Callable | None  # N_q over r_q
    q_b: Linear  # W^UQ: r_q -> tau (d_nope + d_rope), rows per head [nope | rope]
    kv_a: Linear  # W^DKV: d -> r_kv + d_rope
    kv_norm: Callable  # N_kv over r_kv
    kv_b: Linear  # W^UKV: r_kv -> tau (d_nope + d_v), rows per head [k nope | v]
    o: Linear  # W^O: tau d_v -> d
    tau: int
    latent: Latent

    @property
    def G(self) -> int:  # every head has keys and values of its own (decompressed from the shared latent)
        return self.tau

    @property
    def d_k(self) -> int:
        return self.latent.d_k

    def per_head(self) -> dict:
        """Wq (tau, r_q or d, d_k): W^UQ (or W^Q) per head; Wk (tau, r_kv, d_nope) and Wv (tau, r_kv, d_v): W^UKV
        per head, so K^C_j = c^KV Wk[j] and V_j = c^KV Wv[j]; Wo (tau d_v, d); no biases but bo. Views."""
        tau, lt = self.tau, self.latent
        Wq = self.q_b.W.reshape(tau, lt.d_k, -1).transpose(0, 2, 1)
        Wkv = self.kv_b.W.reshape(tau, lt.d_nope + lt.d_v, -1).transpose(0, 2, 1)
        return {"Wq": Wq, "Wk": Wkv[..., : lt.d_nope], "Wv": Wkv[..., lt.d_nope :], "Wo": self.o.x_at_W,
                "bq": None, "bk": None, "bv": None, "bo": self.o.b}  # fmt: skip

    def steps(self) -> dict:
        """What `qkv explain` needs to redo the layer (in the notation's orientation, H W): W_dq, b_dq, q_norm
        (None without a query latent: Wq is then W^Q), W_dkv, b_dkv, kv_norm ({"w", "eps"}) and the widths."""
        lt = self.latent

        def norm(n):
            return None if n is None else {"w": n.w, "eps": n.eps}

        return {"d_nope": lt.d_nope, "d_rope": lt.d_rope, "d_v": lt.d_v, "kv_rank": lt.kv_rank,
                "W_dq": None if self.q_a is None else self.q_a.x_at_W, "b_dq": None if self.q_a is None else self.q_a.b,
                "q_norm": norm(self.q_norm), "W_dkv": self.kv_a.x_at_W, "b_dkv": self.kv_a.b,
                "kv_norm": norm(self.kv_norm)}  # fmt: skip


class LatentCache:
    """One layer's MLA cache: the latent N_kv(c^KV) and the turned RoPE key RoPE(k^R) of every token so far."""

    def __init__(self, latent: Latent, capacity: int, dtype):
        self.C = np.empty((capacity, latent.kv_rank), dtype=dtype)
        self.R = np.empty((capacity, latent.d_rope), dtype=dtype)
        self.length = 0

    def append(self, C, R):  # [m, r_kv], [m, d_rope] new tokens -> every token's so far (views)
        start, end = self.length, self.length + C.shape[0]
        if end > self.C.shape[0]:
            raise QkvError(f"the KV cache holds {self.C.shape[0]} tokens: no room for {end}")
        self.C[start:end], self.R[start:end] = C, R
        self.length = end
        return self.C[:end], self.R[:end]

    @property
    def nbytes(self) -> int:
        return self.C[: self.length].nbytes + self.R[: self.length].nbytes


def deinterleave(W, heads: int, width: int, rope: int):  # [heads width, d_in] -> the same, RoPE rows as halves
    """Rows (x0, x1, x2, x3 ..) of the last `rope` rows of each head's `width` become (x0, x2, .. | x1, x3, ..)."""
    order = np.arange(heads * width).reshape(heads, width)
    tail = order[:, width - rope :]
    order[:, width - rope :] = np.concatenate([tail[:, 0::2], tail[:, 1::2]], axis=1)
    return np.ascontiguousarray(W[order.ravel()])


def queries(H, w: LatentWeights):  # [m, d] -> [tau, m, d_nope + d_rope]
    """Q_j = [Q^C_j | Q^R_j] = N_q(H W^DQ) W_j^UQ (before RoPE)."""
    m = H.shape[0]
    c_q = H if w.q_a is None else w.q_norm(np.ascontiguousarray(w.q_a(H)))  # (m, r_q)
    return w.q_b(c_q).reshape(m, w.tau, w.d_k).transpose(1, 0, 2)  # (m, tau d_k) -> (tau, m, d_k)


def latent_of(H, w: LatentWeights):  # [m, d] -> c^KV [m, r_kv] (normed), k^R [m, d_rope] (not yet turned)
    """[c^KV | k^R] = H W^DKV; the latent goes through N_kv."""
    a = np.ascontiguousarray(w.kv_a(H))  # (m, r_kv + d_rope)
    r = w.latent.kv_rank
    return w.kv_norm(np.ascontiguousarray(a[:, :r])), a[:, r:]


def decompress(C, R, w: LatentWeights):  # [n, r_kv], [n, d_rope] -> K [tau, n, d_k], V [tau, n, d_v]
    """K_j = [c^KV W_j^UK | k^R] (the RoPE key shared by every head), V_j = c^KV W_j^UV."""
    n, lt, tau = C.shape[0], w.latent, w.tau
    kv = w.kv_b(C).reshape(n, tau, lt.d_nope + lt.d_v).transpose(1, 0, 2)  # (tau, n, d_nope + d_v)
    K = np.empty((tau, n, lt.d_k), dtype=kv.dtype)
    K[..., : lt.d_nope] = kv[..., : lt.d_nope]
    K[..., lt.d_nope :] = R[None]  # (1, n, d_rope) broadcast over the heads
    return K, np.ascontiguousarray(kv[..., lt.d_nope :])


def latent_attention(
    H, w: LatentWeights, hooks: Hooks, mask, kernel, cache=None, into=None, rows=None
) -> Attended:  # fmt: skip  [m, d] -> output [m, d], Q [tau, m, d_k], V [tau, n, d_v]
    """Multi-head latent attention of one layer; see the module docstring. cache: a LatentCache (the new tokens'
    latents and RoPE keys are appended, and every cached one is decompressed); into, rows: as self_attention's."""
    m, lt = H.shape[0], w.latent
    Q_pre = queries(H, w)
    C, R_pre = latent_of(H, w)
    Q = Q_pre
    R = R_pre
    if hooks.rotate is not None:  # RoPE turns the rope parts only: Q^R_j and the shared k^R
        Q = Q_pre.copy()
        Q[..., lt.d_nope :] = hooks.rotate(Q_pre[..., lt.d_nope :])
        R = hooks.rotate(R_pre[None])[0]
    K_pre = None
    if cache is None:
        K_pre = decompress(C, R_pre, w)[0] if hooks.rotate is not None else None
    else:
        C, R = cache.append(C, R)  # (n, r_kv), (n, d_rope): every token so far
    K, V = decompress(C, R, w)
    if hooks.values is not None:
        V = hooks.values(V)
    heads, weights = attention(Q, K, V, mask=mask, scale=hooks.scale, kernel=kernel, softcap=hooks.softcap, into=into,
                               rows=rows)  # fmt: skip
    concat = heads.transpose(1, 0, 2).reshape(m, w.tau * lt.d_v)  # (tau, m, d_v) -> (m, tau d_v)
    output = w.o(concat)  # concat(heads) W^O: (m, tau d_v) x (tau d_v, d) -> (m, d)
    return Attended(H, Q, K, V, Q_pre if hooks.rotate is not None else None, K_pre, weights, heads, output)
