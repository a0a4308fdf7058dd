"""Load a checkpoint: a Hugging Face folder (config.json, safetensors, tokenizer.json) or a GGUF file (llama.cpp),
its config read through the family registry, its tensors checked before any value is read, its weights prepared."""

from __future__ import annotations

from pathlib import Path

from qkv_cli.errors import QkvError
from qkv_cli.models.families.registry import config_from_dict, family_for, read_config
from qkv_cli.models.formats.find import check_folder, display_name, is_gguf
from qkv_cli.models.formats.safetensors import Tensors, check_weights, read_weights

HINT = "--dtype float32, or a smaller model"


def stored_tensors(path: Path, name: str = ""):
    """(ModelConfig, every stored tensor under Hugging Face names) from the headers: no weight is read (a GGUF file's
    rope_freqs, rot/2 numbers of its config, is)."""
    path = Path(path)
    if is_gguf(path):
        from qkv_cli.models.formats.gguf.mapping import config_dict, hf_tensors
        from qkv_cli.models.formats.gguf.reader import read_gguf

        gguf = read_gguf(path)
        raw = config_dict(gguf.metadata, gguf.tensors, f"GGUF file '{path.name}'")
        return config_from_dict(raw, name or path.stem), hf_tensors(gguf.metadata, gguf.tensors, raw)
    check_folder(path)
    return read_config(path, name or display_name(path)), read_weights(path)


def load_model(path, dtype="float32", name: str = "", max_memory: int | None = None):
    """Load the checkpoint at `path` (a folder or a .gguf file) for the NumPy forward pass, weights cast once to
    `dtype`. max_memory: refuse, before any value is read, a model whose weights in `dtype` would not fit."""
    if str(dtype) not in ("float32", "float64"):
        raise QkvError(f"dtype {dtype!r} is not supported: use float32 or float64")
    path = Path(path)
    if is_gguf(path):
        return _load_gguf(path, str(dtype), name or path.stem, max_memory)
    check_folder(path)
    name = name or display_name(path)
    config = read_config(path, name)
    return _build(config, read_weights(path), path, str(dtype), name, max_memory, "config.json")


def _load_gguf(path: Path, dtype: str, name: str, max_memory):
    from qkv_cli.models.formats.gguf.mapping import config_dict, hf_tensors
    from qkv_cli.models.formats.gguf.reader import read_gguf

    gguf = read_gguf(path)
    raw = config_dict(gguf.metadata, gguf.tensors, f"GGUF file '{path.name}'")
    config = config_from_dict(raw, name)
    tensors = hf_tensors(gguf.metadata, gguf.tensors, raw)

    def tokenizer():
        from qkv_cli.text.gguf_vocab import tokenizer_from_gguf

        return tokenizer_from_gguf(gguf.metadata)

    model = _build(config, tensors, path, dtype, name, max_memory, "GGUF metadata", tokenizer)
    model.metadata = gguf.metadata
    return model


def _build(config, stored: dict, path: Path, dtype: str, name: str, max_memory, source: str, tokenizer=None):
    import numpy as np

    from qkv_cli.models.encdec_model import EncDecModel
    from qkv_cli.models.model import Model

    family = family_for(config.family)
    tensors = check_weights(stored, family.tensor_shapes(config), family.PREFIXES, name, source)
    head = getattr(family, "HEAD", None)
    if head is not None and not (config.embeddings and config.embeddings.tied) and head in stored:
        if tuple(stored[head].shape) != (config.vocab_size, config.d):
            raise QkvError(f"{name}: tensor '{head}' has shape {stored[head].shape}, expected "
                           f"({config.vocab_size}, {config.d}) from its {source}")  # fmt: skip
        tensors["__head__"] = stored[head]
    extra = getattr(family, "optional_tensors", None)  # read when present (BERT's masked-LM head), full names
    if extra is not None:
        held = {k: shape for k, shape in extra(config).items() if k in stored}
        tensors |= check_weights(stored, held, ("",), name, source)
    weights = Tensors(tensors, np.dtype(dtype), name)
    itemsize = np.dtype(dtype).itemsize
    if getattr(family, "STREAMED", False):  # read layer by layer as the pass reaches it (models.formats.stream)
        params = family.prepare(weights, config, np.dtype(dtype))
        model = Model(config, path, dtype, params, name=name, tokenizer=tokenizer)
        model.fixed_bytes = weights.nbytes(itemsize, family.fixed_keys(config))
        if max_memory is not None:
            from qkv_cli.models.formats.stream import fit

            fit(params, model.fixed_bytes, max_memory)
            _check_streamed(model, weights.nbytes(itemsize), max_memory)
        return model
    if max_memory is not None:
        from qkv_cli.core.budget import check_budget

        check_budget(weights.nbytes(itemsize), max_memory, HINT, what=f"loading {name}'s weights", dtype=dtype)
    weights.read_ahead(skip=("__head__",))  # the output head is read on first use (predict, generate)
    try:
        params = family.prepare(weights, config, np.dtype(dtype))
    finally:
        weights.cancel()
    make = EncDecModel if family.is_encoder_decoder else Model  # an encoder-decoder runs its own forward
    model = make(config, path, dtype, params, name=name, tokenizer=tokenizer)
    model.weights_bytes = weights.nbytes(itemsize)
    return model


def _check_streamed(model, total: int, max_memory: int) -> None:
    """A streamed model needs at least its fixed weights, two layers and a block of the head's rows."""
    from qkv_cli.core.budget import human
    from qkv_cli.errors import TooLargeError

    need = model.weights_bytes
    if need > max_memory:
        raise TooLargeError(
            f"{model.name} does not fit even when read one layer at a time: its weights take {human(total)} in "
            f"{model.dtype.name}, and two layers with the head's rows {human(need)}, more than --max-memory "
            f"{human(max_memory)}"
        )
