"""Generation on a model whose weights do not fit the budget: the layers that are not resident are read again at
every step, and the tokens are the same as with every layer resident; a progress line on a terminal's stderr
(nothing on a pipe, nothing with --quiet), and the time a token took in the summary."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys

import pytest
from clitools import invoke
from helpers import smollm2_gguf

ARGS = ["generate", "The capital of France is", "--max-new-tokens", "5", "--format", "json"]


@pytest.fixture(scope="module")
def gguf():
    return str(smollm2_gguf())


def test_weights_that_do_not_fit_still_generate_the_same_tokens(gguf):
    from qkv_cli.models import load_model

    weights = load_model(gguf, dtype="float32").weights_bytes  # every layer resident (the budget's default)
    whole = invoke([*ARGS, "--model", gguf])
    tight = invoke([*ARGS, "--model", gguf, "--max-memory", f"{weights // 2 // 2**20}MiB"])
    assert whole.exit_code == 0 and tight.exit_code == 0, tight.output
    a, b = json.loads(whole.stdout), json.loads(tight.stdout)
    assert [s["id"] for s in a["steps"]] == [s["id"] for s in b["steps"]] and a["text"] == b["text"]
    for s, t in zip(a["steps"], b["steps"], strict=True):
        assert abs(s["prob"] - t["prob"]) < 1e-6
    timing = b["timing"]
    assert set(timing) == {"prefill_seconds", "seconds", "seconds_per_token"}  # the machine's figures: no bound here
    assert all(isinstance(v, float) for v in timing.values())


def test_the_table_summary_gives_the_time_a_token_took(gguf):
    res = invoke(["generate", "Hello", "--model", gguf, "--max-new-tokens", "3"])
    assert res.exit_code == 0, res.output
    assert " s a token after the prompt's " in res.stdout


def run_on_a_terminal(args) -> tuple[int, bytes]:
    """Run qkv with stderr on a pseudo-terminal (stdout to a pipe); returns (exit code, what the terminal got)."""
    main, child = pty.openpty()
    cmd = [sys.executable, "-m", "qkv_cli", *args]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=child, stdin=subprocess.DEVNULL)
    os.close(child)
    seen = b""
    while True:
        try:
            chunk = os.read(main, 4096)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        seen += chunk
    proc.communicate(timeout=300)
    os.close(main)
    return proc.returncode, seen


def test_a_progress_line_on_a_terminal_and_none_with_quiet(gguf):
    code, seen = run_on_a_terminal([*ARGS, "--model", gguf])
    assert code == 0
    assert b"writing token 1 of 5" in seen and b"writing token 5 of 5" in seen and b" s a token" in seen
    assert seen.endswith(b"\r\x1b[K")  # the line is cleared at the end
    code, seen = run_on_a_terminal([*ARGS, "--model", gguf, "--quiet"])
    assert code == 0 and b"writing token" not in seen


def test_no_progress_line_on_a_pipe(gguf):
    res = invoke([*ARGS, "--model", gguf])
    assert res.exit_code == 0 and "writing token" not in res.stderr
