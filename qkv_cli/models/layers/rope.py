"""Rotary position embedding (RoPE) frequencies in the Hugging Face convention, with their scaling types.

Position p turns each pair of a head's first `rot` dimensions by the angle p * theta_k, theta_k = inv_freq[k]:

    inv_freq_k = 1 / base^(2k / rot),  k = 0 .. rot/2 - 1   (then scaled: linear, dynamic, llama3, yarn, longrope)
    cos, sin = cos(p inv_freq), sin(p inv_freq), each repeated twice: [theta_0 .. theta_{rot/2-1}, theta_0 ..]
    rope(x) = x * cos + rotate_half(x) * sin,    rotate_half([x1, x2]) = [-x2, x1]      (halves, not pairs)

so dimension k is paired with dimension k + rot/2 (the rotation itself is core/rope.py). The dimensions after `rot`
(partial rotary, GPT-NeoX) pass through. A GGUF file of Llama 3.1 holds its scaling as llama.cpp's per-pair factors
(`rope_freqs`): theta_k / freq_factors[k], as ggml_rope_ext divides them. In float32 every step runs in float32 as
transformers (and llama.cpp) do; in float64 every step is float64.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from qkv_cli.core import rope as formula
from qkv_cli.errors import QkvError

MAX_FACTOR = 1000.0  # real scaling factors are 2 to 64; a larger one is a broken file (and overflows the context)


@dataclass(frozen=True)
class Rope:
    theta: float  # the base
    rot: int  # rotated dimensions per head (head_dim, or its first part with partial rotary)
    kind: str = "default"
    factor: float = 1.0
    max_positions: int = 0  # dynamic: the length beyond which the base grows
    original_max_positions: int = 0  # llama3, yarn
    low_freq_factor: float = 1.0  # llama3
    high_freq_factor: float = 4.0  # llama3
    attention_factor: float | None = None  # yarn
    beta_fast: float = 32.0  # yarn
    beta_slow: float = 1.0  # yarn
    mscale: float | None = None  # yarn
    mscale_all_dim: float | None = None  # yarn
    truncate: bool = True  # yarn
    short_factor: tuple[float, ...] | None = None  # longrope: per-pair factors within original_max_positions
    long_factor: tuple[float, ...] | None = None  # longrope: beyond it
    freq_factors: tuple[float, ...] | None = None  # llama.cpp's rope_freqs (GGUF): theta_k / freq_factors[k]

    def __post_init__(self):
        if self.kind not in KINDS:
            raise QkvError(f"RoPE scaling type {self.kind!r} is not supported: use one of {', '.join(KINDS)}")
        if self.rot < 2 or self.rot % 2:
            raise QkvError(f"the rotated head width ({self.rot}) must be an even number of at least 2")
        if self.kind == "dynamic" and self.rot < 4:  # the base grows by a power rot / (rot - 2)
            raise QkvError(f"dynamic RoPE needs a rotated head width of at least 4 (its base grows as a power "
                           f"rot / (rot - 2)), got {self.rot}")  # fmt: skip
        if not (math.isfinite(self.theta) and self.theta > 1):
            raise QkvError(f"the RoPE base (rope_theta) must be a finite number above 1, got {self.theta}")
        if not (math.isfinite(self.factor) and 0 < self.factor <= MAX_FACTOR):
            raise QkvError(f"the RoPE scaling factor must be a number in (0, {MAX_FACTOR:,}], got {self.factor}")
        if self.kind in ("llama3", "yarn", "longrope") and self.original_max_positions < 1:
            raise QkvError(f"{self.kind} RoPE: original_max_position_embeddings must be at least 1, "
                           f"got {self.original_max_positions}")  # fmt: skip
        if self.kind == "llama3" and not 0 < self.low_freq_factor < self.high_freq_factor < math.inf:
            raise QkvError("llama3 RoPE: low_freq_factor and high_freq_factor must be finite with 0 < low < high, "
                           f"got {self.low_freq_factor} and {self.high_freq_factor}")  # fmt: skip
        if self.kind == "yarn":
            for name in ("beta_fast", "beta_slow", "attention_factor", "mscale", "mscale_all_dim"):
                value = getattr(self, name)
                if value is not None and not (math.isfinite(value) and value > 0):
                    raise QkvError(f"yarn RoPE: {name} must be a positive number, got {value}")
        if self.kind == "longrope":
            for name in ("short_factor", "long_factor"):
                value = getattr(self, name)
                if value is None or len(value) != self.rot // 2 or not all(math.isfinite(f) and f > 0 for f in value):
                    raise QkvError(f"longrope RoPE: {name} must list {self.rot // 2} positive numbers (one per rotated "
                                   f"pair), got {value!r}")  # fmt: skip
            if self.attention_factor is not None and not (
                math.isfinite(self.attention_factor) and self.attention_factor > 0
            ):
                raise QkvError(
                    f"longrope RoPE: attention_factor must be a positive number, got {self.attention_factor}"
                )
        if self.freq_factors is not None:
            self._check_factors()

    def _check_factors(self):
        if self.kind in ("dynamic", "llama3", "longrope"):
            raise QkvError(f"{self.kind} RoPE cannot also have per-pair factors (rope_freqs): it would scale twice")
        if len(self.freq_factors) != self.rot // 2:
            raise QkvError(f"{len(self.freq_factors)} RoPE frequency factors (rope_freqs) for {self.rot // 2} rotated "
                           "pairs: there must be one per pair")  # fmt: skip
        bad = [f for f in self.freq_factors if not (math.isfinite(f) and f > 0)]
        if bad:
            raise QkvError(f"the RoPE frequency factors (rope_freqs) must be finite and positive, got {bad[0]}")


def inv_freq(rope: Rope, m: int, dtype=np.float64):  # -> ([rot/2] inverse frequencies, attention scaling)
    """theta_k for a text of m tokens (dynamic and LongRoPE depend on m), and the factor that multiplies cos and
    sin: the kind's function from KINDS (transformers' ROPE_INIT_FUNCTIONS), then llama.cpp's per-pair factors."""
    dt = np.dtype(dtype).type
    freq, scaling = KINDS[rope.kind](rope, m, dt)
    if rope.freq_factors is not None:  # llama.cpp divides before linear or YaRN scaling: the same, both are linear
        freq = freq / np.asarray(rope.freq_factors, dtype=dtype)
    return freq, scaling


def _exponents(rope: Rope, dt):  # [rot/2]: 2k / rot
    return np.arange(0, rope.rot, 2).astype(dt) / dt(rope.rot)


def _default(rope: Rope, m: int, dt):  # 1 / base^(2k / rot)
    return dt(1.0) / (dt(rope.theta) ** _exponents(rope, dt)), 1.0


def _linear(rope: Rope, m: int, dt):  # positions divided by factor: the frequencies are
    freq, _ = _default(rope, m, dt)
    return freq / dt(rope.factor), 1.0


def _dynamic(rope: Rope, m: int, dt):  # NTK: the base grows with the text beyond max_positions
    base, dim = rope.theta, rope.rot
    if m > rope.max_positions > 0:
        base = base * ((rope.factor * m / rope.max_positions) - (rope.factor - 1)) ** (dim / (dim - 2))
    return dt(1.0) / (dt(base) ** _exponents(rope, dt)), 1.0


def _longrope(rope: Rope, m: int, dt):  # Phi-3: per-pair factors, short within the trained context, long beyond
    old = rope.original_max_positions
    ext = rope.long_factor if m > old else rope.short_factor
    scaling = rope.attention_factor
    if scaling is None:  # factor: as given, or max_position_embeddings / original_max_position_embeddings
        scaling = 1.0 if rope.factor <= 1 else math.sqrt(1 + math.log(rope.factor) / math.log(old))
    return dt(1.0) / (np.asarray(ext, dtype=dt) * dt(rope.theta) ** _exponents(rope, dt)), float(scaling)


def _llama3(rope: Rope, m: int, dt):  # Llama 3.1: low frequencies divided by factor, a smooth ramp in between
    freq, _ = _default(rope, m, dt)
    old = rope.original_max_positions
    low_wavelen, high_wavelen = old / rope.low_freq_factor, old / rope.high_freq_factor
    wavelen = dt(2 * math.pi) / freq
    scaled = np.where(wavelen > low_wavelen, freq / dt(rope.factor), freq)
    smooth = (dt(old) / wavelen - dt(rope.low_freq_factor)) / dt(rope.high_freq_factor - rope.low_freq_factor)
    smoothed = (1 - smooth) * scaled / dt(rope.factor) + smooth * scaled
    medium = ~(wavelen < high_wavelen) & ~(wavelen > low_wavelen)
    return np.where(medium, smoothed, scaled).astype(freq.dtype), 1.0


def _yarn(rope: Rope, m: int, dt):  # YaRN: interpolation ramped in by dimension, and a scale on cos and sin
    dim, base, factor = rope.rot, rope.theta, rope.factor

    def mscale(scale, m=1.0):
        return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0

    scaling = rope.attention_factor
    if scaling is None:
        scaling = (mscale(factor, rope.mscale) / mscale(factor, rope.mscale_all_dim)
                   if rope.mscale and rope.mscale_all_dim else mscale(factor))  # fmt: skip

    def correction(rotations):
        return (dim * math.log(rope.original_max_positions / (rotations * 2 * math.pi))) / (2 * math.log(base))

    low, high = correction(rope.beta_fast), correction(rope.beta_slow)
    if rope.truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    pos_freqs = dt(base) ** (np.arange(0, dim, 2).astype(dt) / dt(dim))
    extrapolation, interpolation = dt(1.0) / pos_freqs, dt(1.0) / (dt(factor) * pos_freqs)
    ramp = np.clip((np.arange(dim // 2).astype(dt) - dt(low)) / dt(high - low if high != low else 0.001), 0, 1)
    keep = 1 - ramp
    return interpolation * (1 - keep) + extrapolation * keep, float(scaling)


KINDS = {
    "default": _default,
    "linear": _linear,
    "dynamic": _dynamic,
    "llama3": _llama3,
    "yarn": _yarn,
    "longrope": _longrope,
}  # kind -> (rope, m, dtype) -> (inv_freq [rot/2], attention scaling)


def cos_sin(rope: Rope, m: int, dtype=np.float64, start: int = 0):  # -> cos, sin [m, rot]: positions start..
    """cos and sin for positions start .. start + m - 1 (a KV cache's new tokens start after the cached ones).
    Read-only arrays, computed once for all the layers that share a RoPE (every layer but Gemma 3's)."""
    return _cos_sin(rope, m, np.dtype(dtype), start)


@lru_cache(maxsize=8)
def _cos_sin(rope: Rope, m: int, dtype, start: int):
    freq, scaling = inv_freq(rope, start + m, dtype)
    cos, sin = formula.cos_sin(freq, m, scaling, dtype, start)
    cos.flags.writeable = sin.flags.writeable = False
    return cos, sin


apply = formula.apply  # the rotation itself: core/rope.py
