"""Shared by the CLI tests: invoke the app, and check that an error is one clean line."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from qkv_cli.cli import app

SMALL = ["--d", "8", "--tau", "2"]  # a model small enough that only the option under test can fail


def invoke(args, **kwargs):
    return CliRunner().invoke(app, [str(a) for a in args], **kwargs)


def assert_one_line_error(result, *fragments):
    """Exit 2, one non-empty stderr line starting with `qkv: error:`, holding every fragment; no traceback."""
    assert result.exit_code == 2, f"exit {result.exit_code}: {result.output!r}"
    lines = result.stderr.splitlines()
    assert len(lines) == 1, lines
    line = lines[0]
    assert line.startswith("qkv: error: ") and len(line) > len("qkv: error: ")
    assert "Traceback" not in result.output and "internal error" not in line
    for fragment in fragments:
        assert fragment.lower() in line.lower(), f"{fragment!r} not in {line!r}"
    return line


def files_in(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}
