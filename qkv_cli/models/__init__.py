"""Real checkpoints (BERT and GPT-2 families) run by a NumPy forward pass, every layer's attention inspectable.

    from qkv_cli.models import resolve_model, load_model
    model = load_model(resolve_model("sentence-transformers/all-MiniLM-L6-v2"), dtype="float32")
    result = model.run("The cat sat on the mat.", layers=-1, kernel="vectorized")
    result.attentions          # (L, tau, m, m)
    result.layer(-1).Q         # (tau, m, d_k) = H Wq + bq per head

Names are imported on first use, so ``import qkv_cli.models`` loads neither NumPy nor safetensors.
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "resolve_model": "load",
    "load_model": "load",
    "find_models": "load",
    "hub_cache": "load",
    "ModelConfig": "config",
    "Param": "config",
    "FAMILIES": "config",
    "read_config": "config",
    "config_from_dict": "config",
    "parameter_table": "config",
    "parameter_count": "config",
    "Model": "model",
    "ModelResult": "model",
    "LayerDetail": "model",
    "DETAIL_FIELDS": "model",
    "select_layers": "model",
    "estimate_bytes": "model",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name):
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"qkv_cli.models.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module 'qkv_cli.models' has no attribute {name!r}")
