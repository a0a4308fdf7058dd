"""Pieces every family shares: LayerNorm, linear maps, activations, and the attention sub-layer.

All functions keep the input's dtype (float32 or float64): constants are made with ``x.dtype.type(...)``,
since under NumPy 2 a float32 array times a NumPy float64 scalar becomes float64.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from qkv_cli.kernels import attention
from qkv_cli.models.erf import erf


def layer_norm(x, gamma, beta, eps):  # [m, d], [d], [d] -> [m, d]
    """(x - mean) / sqrt(var + eps) * gamma + beta over the last axis (biased variance, as in PyTorch)."""
    t = x.dtype.type
    xc = x - x.mean(axis=-1, keepdims=True)
    var = np.einsum("ij,ij->i", xc, xc)[:, None] if xc.ndim == 2 else (xc * xc).sum(axis=-1, keepdims=True)
    var *= t(1 / x.shape[-1])
    var += t(eps)
    np.sqrt(var, out=var)
    xc /= var
    xc *= gamma
    xc += beta
    return xc


@dataclass
class Linear:
    """y = x W + b with W kept exactly as the checkpoint stores it (no transposed copy at load).

    out_in=True: W is (d_out, d_in), a PyTorch Linear (BERT); y is computed as (W x^T)^T, which BLAS runs as
    fast as x @ W on a pre-transposed copy (faster here), and y comes out as a transposed (Fortran-order) view.
    out_in=False: W is (d_in, d_out), a GPT-2 Conv1D; y = x W.
    """

    W: np.ndarray
    b: np.ndarray
    out_in: bool

    def __call__(self, x):  # [m, d_in] -> [m, d_out]
        if self.out_in:
            yT = self.W @ x.T  # (d_out, d_in) x (d_in, m) -> (d_out, m)
            yT += self.b[:, None]
            return yT.T
        y = x @ self.W  # (m, d_in) x (d_in, d_out) -> (m, d_out)
        y += self.b
        return y

    @property
    def x_at_W(self):  # (d_in, d_out): the matrix in the notation's orientation, H W (a view)
        return self.W.T if self.out_in else self.W


def linear(x, W, b):  # [m, d_in], [d_in, d_out], [d_out] -> [m, d_out]
    return Linear(W, b, out_in=False)(x)


def gelu(x):  # [...] -> [...]; exact: x Phi(x) = x/2 (1 + erf(x / sqrt(2)))
    t = x.dtype.type
    e = erf(x * t(1 / math.sqrt(2)))
    e += t(1)
    e *= x
    e *= t(0.5)
    return e


def gelu_new(x):  # [...] -> [...]; GPT-2: x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
    t = x.dtype.type
    inner = x * x
    inner *= t(0.044715)
    inner += t(1)
    inner *= x
    inner *= t(math.sqrt(2 / math.pi))
    np.tanh(inner, out=inner)
    inner += t(1)
    inner *= x
    inner *= t(0.5)
    return inner


def relu(x):  # [...] -> [...]
    return np.maximum(x, x.dtype.type(0))


ACTIVATIONS = {"gelu": gelu, "gelu_new": gelu_new, "gelu_pytorch_tanh": gelu_new, "relu": relu}


@dataclass
class AttentionWeights:
    """One layer's attention parameters; qkv fuses [W^q | W^k | W^v] (and their biases) into one Linear."""

    qkv: Linear  # d -> 3d
    o: Linear  # d -> d
    tau: int

    def per_head(self) -> dict:
        """Wq, Wk, Wv (tau, d, d_k) and bq, bk, bv (tau, d_k) as views; Wo (d, d), bo (d,): H Wq + bq = Q."""
        d = self.o.W.shape[0]
        tau, dk = self.tau, d // self.tau
        if self.qkv.out_in:  # (3d, d) -> (3, tau, dk, d) -> (3, tau, d, dk)
            W = self.qkv.W.reshape(3, tau, dk, d).transpose(0, 1, 3, 2)
        else:  # (d, 3d) -> (d, 3, tau, dk) -> (3, tau, d, dk)
            W = self.qkv.W.reshape(d, 3, tau, dk).transpose(1, 2, 0, 3)
        b = self.qkv.b.reshape(3, tau, dk)
        return {"Wq": W[0], "Wk": W[1], "Wv": W[2], "bq": b[0], "bk": b[1], "bv": b[2], "Wo": self.o.x_at_W,
                "bo": self.o.b}  # fmt: skip


@dataclass
class AttentionParts:
    """What one attention sub-layer computed, for inspection (Q = H Wq + bq per head)."""

    H: np.ndarray  # (m, d) the sub-layer's input
    Q: np.ndarray  # (tau, m, dk)
    K: np.ndarray  # (tau, m, dk)
    V: np.ndarray  # (tau, m, dk)
    mask: np.ndarray | None  # (m, m) additive, or None (no masking)
    scale: float
    heads: np.ndarray  # (tau, m, dk)
    weights: np.ndarray  # (tau, m, m)
    output: np.ndarray  # (m, d) concat(heads) Wo + bo


def self_attention(H, w: AttentionWeights, mask, scale, kernel):  # [m, d] -> AttentionParts
    """Multi-head self-attention: Q, K, V = H W^{q,k,v} + b; Softmax(Q K^T * scale + Mask) V; concat W^o + b^o."""
    m, d = H.shape
    tau = w.tau
    dk = d // tau
    if w.qkv.out_in:
        qkvT = w.qkv.W @ H.T  # (3d, d) x (d, m) -> (3d, m)
        qkvT += w.qkv.b[:, None]
        Q, K, V = qkvT.reshape(3, tau, dk, m).transpose(0, 1, 3, 2)  # -> 3 x (tau, m, dk), views
    else:
        qkv = H @ w.qkv.W  # (m, d) x (d, 3d) -> (m, 3d)
        qkv += w.qkv.b
        Q, K, V = qkv.reshape(m, 3, tau, dk).transpose(1, 2, 0, 3)  # -> 3 x (tau, m, dk), views
    heads, weights = attention(Q, K, V, mask=mask, scale=scale, kernel=kernel)
    concat = heads.transpose(1, 0, 2).reshape(m, d)  # (tau, m, dk) -> (m, tau * dk)
    output = w.o(concat)  # concat(heads) W^o + b^o: (m, d) x (d, d) -> (m, d)
    return AttentionParts(H=H, Q=Q, K=K, V=V, mask=mask, scale=scale, heads=heads, weights=weights, output=output)
