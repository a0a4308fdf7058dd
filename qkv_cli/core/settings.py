"""Settings of one random-weights run, checked once at construction (no numpy here: `qkv shapes` imports this)."""

from __future__ import annotations

from dataclasses import dataclass

from qkv_cli.errors import QkvError

DTYPES = ("float64", "float32")
POSITIONS = ("sinusoidal", "none")
PROJECTIONS = ("random", "identity")
ABLATE = ("q", "k", "v")
ABLATE_WITH = ("zeros", "noise")
MAX_WIDTH = 1 << 20  # d or tau beyond a million is a typo, not an experiment


def check_choice(name: str, value: str, choices) -> str:
    if value not in choices:
        raise QkvError(f"unknown {name} {value!r}: choose one of {', '.join(choices)}")
    return value


def check_sizes(d: int, tau: int, kv_heads: int | None = None) -> int:
    """d (model width) and tau (heads) must give a whole head width d_k = d / tau; returns d_k."""
    for name, value in (("d", d), ("tau", tau)):
        if value < 1:
            raise QkvError(f"{name} must be at least 1, got {value}")
        if value > MAX_WIDTH:
            raise QkvError(f"{name} ({value}) is too large: at most {MAX_WIDTH}")
    if tau > d:
        raise QkvError(f"tau ({tau}) cannot exceed d ({d}): each head needs at least one dimension")
    if d % tau:
        raise QkvError(f"d ({d}) must be divisible by tau ({tau}): each head has width d/tau")
    if kv_heads is not None and (kv_heads < 1 or tau % kv_heads):
        ok = ", ".join(str(g) for g in range(1, tau + 1) if tau % g == 0) if tau <= 4096 else "a divisor of tau"
        raise QkvError(f"--kv-heads ({kv_heads}) must divide tau ({tau}): use one of {ok}")
    return d // tau


def check_window(n_c) -> int:
    """A window n_c must be at least 1 (query i sees keys i-n_c+1..i)."""
    if n_c < 1:
        raise QkvError(f"--window ({n_c}) must be at least 1: query i sees keys i-n_c+1..i")
    return int(n_c)


def check_chunk(n_ch) -> int:
    """A chunk n_ch must be a whole number of at least 1 (query i sees keys of its own chunk only)."""
    if isinstance(n_ch, bool) or not isinstance(n_ch, int) or n_ch < 1:
        raise QkvError(f"the chunk size n_ch ({n_ch}) must be at least 1: query i sees keys "
                       "n_ch floor(i / n_ch)..i")  # fmt: skip
    return int(n_ch)


@dataclass(frozen=True)
class Settings:
    """Everything that determines a random-weights run; two equal Settings give identical numbers."""

    d: int = 512
    tau: int = 8
    seed: int = 0
    kernel: str = "vectorized"
    causal: bool = False
    window: int | None = None
    chunk: int | None = None  # n_ch: query i sees keys of its own chunk only (chunked attention, Llama 4)
    scale: str = "auto"
    positions: str = "sinusoidal"
    projection: str = "random"
    dtype: str = "float64"
    tokenizer: str = "word"
    kv_heads: int | None = None  # G key/value heads shared by the tau query heads (grouped-query attention)
    ablate: str | None = None  # q, k or v: replace that projection's output (see qkv_cli.pipeline.ablate)
    ablate_with: str = "zeros"  # zeros or noise

    def __post_init__(self):
        check_sizes(self.d, self.tau, self.kv_heads)
        if not 0 <= self.seed < 2**63:
            raise QkvError(f"--seed {self.seed} is out of range: use 0 .. 2**63 - 1")
        if self.ablate is not None:
            check_choice("--ablate", self.ablate, ABLATE)
        check_choice("--ablate-with", self.ablate_with, ABLATE_WITH)
        check_choice("dtype", self.dtype, DTYPES)
        check_choice("positions", self.positions, POSITIONS)
        check_choice("projection", self.projection, PROJECTIONS)
        from qkv_cli.core.kernels import check_kernel, resolve_scale

        if self.window is not None:
            check_window(self.window)
        if self.chunk is not None:
            check_chunk(self.chunk)
        check_kernel(self.kernel)
        resolve_scale(self.scale, self.d_k)

    @property
    def d_k(self) -> int:
        return self.d // self.tau

    @property
    def G(self) -> int:
        """Key/value heads: tau unless --kv-heads is given."""
        return self.tau if self.kv_heads is None else self.kv_heads

    @property
    def causal_mask(self) -> bool:
        """A sliding window, or chunks, imply causal."""
        return self.causal or self.window is not None or self.chunk is not None
