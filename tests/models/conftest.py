"""Fixtures: tiny checkpoints of the families that need no PyTorch to write, and `built`: tiny models of
tests/support/decoders.py made and saved by transformers (reference tests; a module may define its own)."""

import pytest
from tiny import FAMILIES, make_checkpoint


@pytest.fixture(params=FAMILIES)
def tiny(request, tmp_path):
    return make_checkpoint(tmp_path / f"tiny-{request.param}", request.param)


@pytest.fixture
def tiny_bert(tmp_path):
    return make_checkpoint(tmp_path / "tiny-bert", "bert")


@pytest.fixture
def tiny_gpt2(tmp_path):
    return make_checkpoint(tmp_path / "tiny-gpt2", "gpt2")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """name -> (folder, transformers model), built once per test module."""
    from decoders import build
    from helpers import BuiltOnce

    return BuiltOnce(tmp_path_factory, build)
