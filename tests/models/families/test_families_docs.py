"""docs/families.md's examples are real output: each "`qkv ... --model tiny-<case>` prints" followed by a ```text
block is run on that tiny model (support/decoders.py's case, built by transformers under that name) and compared with
the block; a line `...` in a block stands for any lines left out. (The docs checker, tests/test_readme.py, runs
```console blocks, on installed models.)"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from decoders import CASES

PAGE = Path(__file__).resolve().parents[3] / "docs" / "families.md"
EXAMPLE = re.compile(r"`(qkv [^`]*--model (tiny-[a-z0-9-]+)[^`]*)`\s+prints\n\n```text\n(.*?)```", re.S)
CASE_OF = {"tiny-" + case.replace("_", "-"): case for case in CASES}  # tiny-gpt-oss -> gpt_oss
FAMILIES = ("gpt_oss", "mixtral", "qwen3_moe", "olmoe", "smollm3", "phi3", "deepseek_v3", "deepseek_v2", "llama4_text")
EXAMPLES = [(m.group(1), m.group(2), m.group(3)) for m in EXAMPLE.finditer(PAGE.read_text(encoding="utf-8"))]


def agrees(shown: str, output: str) -> bool:
    """output is shown, where each line `...` of shown may stand for any lines (none included)."""
    parts = re.split(r"^\.\.\.\n", shown, flags=re.M)
    return re.fullmatch(r"(?:.*\n)*?".join(map(re.escape, parts)), output) is not None


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """A folder where tiny-<case> is built (once) when an example names it."""
    return tmp_path_factory.mktemp("families_docs")


@pytest.mark.reference
@pytest.mark.parametrize("command,name,shown", EXAMPLES, ids=[c for c, _, _ in EXAMPLES])
def test_the_docs_examples_are_real_output(command, name, shown, folder, monkeypatch):
    from decoders import build
    from helpers import reference_import
    from test_readme import run_cli

    torch, transformers = reference_import("torch"), reference_import("transformers")
    assert name in CASE_OF, f"{name}: no case of tests/support/decoders.py is named so"
    if not (folder / name).is_dir():
        build(transformers, torch, CASE_OF[name], folder / name)
    monkeypatch.chdir(folder)
    output = run_cli(command)
    assert agrees(shown, output), f"docs/families.md: `{command}` now prints\n{output}"


def test_every_family_has_an_example():
    shown = {CASES[CASE_OF[name]][0] for _, name, _ in EXAMPLES if name in CASE_OF}
    assert set(FAMILIES) <= shown, f"no example on a tiny {sorted(set(FAMILIES) - shown)}"


@pytest.mark.parametrize(
    "shown,output,want",
    [
        ("a\nb\n", "a\nb\n", True),
        ("a\n...\nd\n", "a\nb\nc\nd\n", True),
        ("a\n...\nd\n", "a\nd\n", True),
        ("a\n...\n", "a\nb\n", True),
        ("a\n...\nd\n", "a\nb\nc\n", False),
        ("a\nb\n", "a\nb\nc\n", False),
        ("a\n...\nc\n", "x\nb\nc\n", False),
    ],
)  # fmt: skip
def test_an_ellipsis_line_stands_for_lines_left_out(shown, output, want):
    assert agrees(shown, output) is want
