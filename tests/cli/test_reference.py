"""The docs' command reference is generated from the CLI: every command and every option appears, with its help."""

from pathlib import Path

import pytest

from qkv_cli.cli.reference import command_markdown, command_names, expand, group

DOCS = Path(__file__).resolve().parents[2] / "docs"


def options_of(name):
    """Every spelling of every visible parameter of a command, read from the click command itself."""
    cmd = group().commands[name]
    for param in cmd.params:
        if getattr(param, "hidden", False):
            continue
        yield param, [*param.opts, *param.secondary_opts]


def test_every_command_is_in_the_generated_reference():
    page = expand((DOCS / "reference.md").read_text(encoding="utf-8"))
    names = command_names()
    assert {"run", "heatmap", "view", "learn", "generate"} <= set(names)
    for name in names:
        assert f"## `qkv {name}`" in page


@pytest.mark.parametrize("name", command_names())
def test_every_option_and_its_help_appear(name):
    text = command_markdown(name)
    for param, spellings in options_of(name):
        for spelling in spellings:
            if spelling.startswith("-"):
                assert spelling in text, f"qkv {name}: {spelling} missing from the reference"
        if param.help:
            assert " ".join(param.help.split())[:40].replace("|", "\\|") in text


@pytest.mark.parametrize("name", command_names())
def test_each_command_page_carries_the_generated_options(name):
    pages = [DOCS / "commands" / f"{name}.md", DOCS / f"{name}.md"]
    found = [p for p in pages if p.exists() and f"<!-- qkv-reference: {name} -->" in p.read_text(encoding="utf-8")]
    if not found:
        pytest.skip(f"qkv {name} has no page of its own yet (docs/reference.md covers it)")
    page = expand(found[0].read_text(encoding="utf-8"))
    assert command_markdown(name) in page and "qkv-reference" not in page


def test_a_page_without_a_placeholder_is_left_as_it_is():
    assert expand("# title\n\nno placeholder\n") == "# title\n\nno placeholder\n"
