"""Fixtures: tiny checkpoints of the families that need no PyTorch to write."""

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
