"""Real checkpoints run by a NumPy forward pass, every layer's attention inspectable.

    from qkv_cli.models import resolve_model, load_model
    model = load_model(resolve_model("sentence-transformers/all-MiniLM-L6-v2"), dtype="float32")
    result = model.run("The cat sat on the mat.", layers=[-1])
    result.attentions          # (L, tau, m, m)
    result.layers[5].Q         # (tau, m, d_k) = H Wq + bq per head

Names are imported on first use, so ``import qkv_cli.models`` loads no NumPy.
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "resolve_model": "formats.find",
    "find_models": "catalog",
    "hub_cache": "formats.find",
    "display_name": "formats.find",
    "load_model": "load",
    "ModelConfig": "formats.config",
    "Param": "formats.config",
    "read_config": "families.registry",
    "config_from_dict": "families.registry",
    "parameter_count": "families.registry",
    "parameter_table": "families.registry",
    "FAMILIES": "families.registry",
    "family_for": "families.registry",
    "Model": "model",
    "select_layers": "select",
    "check_layer": "select",
    "estimate_bytes": "model",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name):
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"qkv_cli.models.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module 'qkv_cli.models' has no attribute {name!r}")
