"""Load a checkpoint folder: its config through the family registry, its tensors checked, its weights prepared."""

from __future__ import annotations

from pathlib import Path

from qkv_cli.errors import QkvError
from qkv_cli.models.config import read_config
from qkv_cli.models.find import check_folder, display_name
from qkv_cli.models.registry import family_for
from qkv_cli.models.weights import Tensors, check_weights, read_weights


def load_model(path, dtype="float32", name: str = "", max_memory: int | None = None):
    """Load the checkpoint in folder `path` for the NumPy forward pass, weights cast once to `dtype`.

    max_memory: refuse, before any value is read, a model whose weights in `dtype` would not fit."""
    import numpy as np

    from qkv_cli.models.model import Model

    if str(dtype) not in ("float32", "float64"):
        raise QkvError(f"dtype {dtype!r} is not supported: use float32 or float64")
    folder = Path(path)
    check_folder(folder)
    name = name or display_name(folder)
    config = read_config(folder, name)
    family = family_for(config.family)
    tensors = check_weights(read_weights(folder), family.tensor_shapes(config), family.PREFIXES, name)
    weights = Tensors(tensors, np.dtype(str(dtype)), name)
    if max_memory is not None:
        from qkv_cli.core.budget import check_budget

        check_budget(weights.nbytes(np.dtype(str(dtype)).itemsize), max_memory,
                     "--dtype float32, or a smaller model", what=f"{name}'s weights")  # fmt: skip
    params = family.prepare(weights, config, np.dtype(str(dtype)))
    return Model(config, folder, str(dtype), params, name=name)
