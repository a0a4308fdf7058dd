"""Pieces every family shares: LayerNorm, RMSNorm, linear maps and activations (the attention is attention.py).

All functions keep the input's dtype (float32 or float64): constants are made with ``x.dtype.type(...)``,
since under NumPy 2 a float32 array times a NumPy float64 scalar becomes float64.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from qkv_cli.models.layers.erf import erf


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


def rms_norm(x, w, eps, offset: float = 0.0):  # [m, d], [d] -> [m, d]
    """x / sqrt(mean(x^2) + eps) * (offset + w) over the last axis; Gemma stores w - 1 (offset 1)."""
    t = x.dtype.type
    ms = np.einsum("ij,ij->i", x, x)[:, None] if x.ndim == 2 else (x * x).sum(axis=-1, keepdims=True)
    ms *= t(1 / x.shape[-1])
    ms += t(eps)
    np.sqrt(ms, out=ms)
    np.reciprocal(ms, out=ms)  # x * (1 / sqrt(..)): PyTorch's x * rsqrt(..), the same two roundings
    y = x * ms
    y *= (w + t(offset)) if offset else w
    return y


@dataclass
class Linear:
    """y = x W + b with W kept exactly as the checkpoint stores it (no transposed copy at load).

    out_in=True: W is (d_out, d_in), a PyTorch Linear (BERT); y is computed as (W x^T)^T, which BLAS runs as
    fast as x @ W on a pre-transposed copy (faster here), and y comes out as a transposed (Fortran-order) view.
    out_in=False: W is (d_in, d_out), a GPT-2 Conv1D; y = x W.
    """

    W: np.ndarray
    b: np.ndarray | None  # None: no bias (Llama and most RoPE decoders)
    out_in: bool

    def __call__(self, x):  # [m, d_in] -> [m, d_out]
        if self.out_in:
            yT = self.W @ x.T  # (d_out, d_in) x (d_in, m) -> (d_out, m)
            if self.b is not None:
                yT += self.b[:, None]
            return yT.T
        y = x @ self.W  # (m, d_in) x (d_in, d_out) -> (m, d_out)
        if self.b is not None:
            y += self.b
        return y

    @property
    def x_at_W(self):  # (d_in, d_out): the matrix in the notation's orientation, H W (a view)
        return self.W.T if self.out_in else self.W


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


def silu(x):  # [...] -> [...]; x sigmoid(x) = x / (1 + exp(-x))
    return silu_(x.copy())


def silu_(x):  # [...] -> x itself, overwritten with silu(x): one temporary instead of three
    e = np.negative(x)
    with np.errstate(over="ignore"):  # exp(-x) = inf for very negative x: x / inf = -0, as in PyTorch
        np.exp(e, out=e)
    e += x.dtype.type(1)
    return np.divide(x, e, out=x)


IN_PLACE = {"silu": silu_}  # activations that can overwrite their input (a fresh product) instead of copying it
ACTIVATIONS = {"gelu": gelu, "gelu_new": gelu_new, "gelu_pytorch_tanh": gelu_new, "gelu_fast": gelu_new,
               "relu": relu, "silu": silu}  # fmt: skip
