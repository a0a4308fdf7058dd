"""Shared test setup: a fixed terminal width for rich, and the PyTorch/transformers reference gate."""

from __future__ import annotations

import os

import pytest
from helpers import minilm_dir, reference_import

os.environ.setdefault("COLUMNS", "120")
os.environ.setdefault("TERM", "dumb")
os.environ["MPLBACKEND"] = "Agg"


@pytest.fixture
def torch():
    return reference_import("torch")


@pytest.fixture
def transformers():
    reference_import("torch")
    return reference_import("transformers")


@pytest.fixture
def minilm():
    return minilm_dir()


@pytest.fixture
def gpt2_dir(transformers, torch, tmp_path):
    """A small random GPT-2 (2 layers, 4 heads, d 32) saved by transformers, with qkv's BPE tokenizer.json."""
    import shutil

    from tokenizers import Tokenizer

    from qkv_cli.text.tokens import BPE_PATH

    folder = tmp_path / "gpt2"
    vocab = Tokenizer.from_file(str(BPE_PATH)).get_vocab_size()
    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=vocab, n_positions=64, n_embd=32, n_layer=2, n_head=4)
    transformers.GPT2Model(config).eval().save_pretrained(folder, safe_serialization=True)
    shutil.copy(BPE_PATH, folder / "tokenizer.json")
    return folder
