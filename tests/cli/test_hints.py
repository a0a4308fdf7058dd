"""A hint never offers an option already given: the out-of-memory line and the attribution refusals suggest what
would still help."""

from __future__ import annotations

import pytest
from clitools import SMALL, assert_one_line_error, invoke


@pytest.fixture
def oom(monkeypatch):
    import qkv_cli.pipeline.seeded

    def run(*args, **kwargs):
        raise MemoryError

    monkeypatch.setattr(qkv_cli.pipeline.seeded, "run", run)


@pytest.mark.parametrize("given, offered, not_offered", [
    ([], ["--dtype float32", "--window N"], []),
    (["--dtype", "float32"], ["--window N", "a shorter text"], ["--dtype float32"]),
    (["--dtype=float32", "--window", "2"], ["a shorter text"], ["--dtype float32", "--window N"]),
])  # fmt: skip
def test_out_of_memory_suggests_what_was_not_given(oom, given, offered, not_offered):
    line = assert_one_line_error(invoke(["run", "hi there", *SMALL, *given]), "out of memory", *offered)
    for hint in not_offered:
        assert hint not in line, line


def test_out_of_memory_with_a_checkpoint_suggests_its_own_options(monkeypatch, tmp_path):
    from tiny import make_checkpoint

    import qkv_cli.pipeline.checkpoint

    def run(*args, **kwargs):
        raise MemoryError

    monkeypatch.setattr(qkv_cli.pipeline.checkpoint, "run", run)
    folder = make_checkpoint(tmp_path / "gpt2", "gpt2")
    line = assert_one_line_error(invoke(["run", "the cat", "--model", folder, "--dtype", "float32"]), "out of memory")
    assert "--dtype float32" not in line and "--window" not in line and "fewer heads" not in line, line
    assert "--rows" in line, line


def test_the_value_norm_refusal_does_not_offer_value_norm():
    line = assert_one_line_error(
        invoke(["attribute", "the cat sat on the mat", *SMALL, "--method", "value-norm", "--max-memory", "1MB"]),
        "value-norm needs",
    )
    assert "--method value-norm" not in line.split("; try ")[1], line
    assert "a shorter text" in line, line


def test_a_checkpoints_value_norm_refusal_does_not_offer_it(tmp_path):
    from tiny import make_checkpoint

    folder = make_checkpoint(tmp_path / "gpt2", "gpt2")
    args = ["attribute", "the cat sat on the mat and the dog ran", "--model", folder, "--method"]
    line = assert_one_line_error(invoke([*args, "value-norm", "--max-memory", "1MB"]), "needs")
    assert "--method value-norm" not in line.split("; try ")[1], line
    rollout = assert_one_line_error(invoke([*args, "rollout", "--max-memory", "40KB"]), "needs")
    assert "--method value-norm" in rollout.split("; try ")[1], rollout  # another method: value-norm still helps
