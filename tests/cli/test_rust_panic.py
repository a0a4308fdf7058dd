"""A panic inside `tokenizers` (a hostile pre-tokenizer regex) is qkv's one line on stderr, without Rust's own
`thread '<unnamed>' panicked at ...` lines or, with RUST_BACKTRACE=1, its backtrace."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from tiny import make_checkpoint

HOSTILE = {"type": "Split", "pattern": {"Regex": "(a|aa)+$"}, "behavior": "Isolated", "invert": False}
TEXT = "a" * 40 + "!"  # catastrophic backtracking: Oniguruma's retry-limit-in-match, a panic in tokenizers


def qkv(*args, **env):
    done = subprocess.run([sys.executable, "-m", "qkv_cli", *map(str, args)], capture_output=True, text=True,
                          timeout=120, env={**os.environ, **env})  # fmt: skip
    return done


@pytest.fixture
def folder(tmp_path):
    folder = make_checkpoint(tmp_path / "m", "bert")
    tok = json.loads((folder / "tokenizer.json").read_text())
    tok["pre_tokenizer"] = HOSTILE
    (folder / "tokenizer.json").write_text(json.dumps(tok))
    return folder


@pytest.mark.parametrize("backtrace", ["0", "1", "full"])
@pytest.mark.parametrize("source", ["--model", "--tokenizer"])
def test_panic_is_one_line(source, backtrace, folder):
    where = folder if source == "--model" else folder / "tokenizer.json"
    done = qkv("run", TEXT, source, where, RUST_BACKTRACE=backtrace)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1, lines[:5]
    assert lines[0].startswith("qkv: error: the tokenizer failed") and "retry-limit-in-match" in lines[0]


def test_held_stderr_replays_what_is_not_a_panic():
    code = (
        "import os\nfrom qkv_cli.text.rust import held_stderr\n"
        "with held_stderr():\n    os.write(2, b'kept\\n')\n"
        "class PanicException(BaseException): pass\n"
        "try:\n    with held_stderr():\n        os.write(2, b'dropped\\n')\n        raise PanicException('x')\n"
        "except PanicException:\n    os.write(2, b'after\\n')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stderr == "kept\nafter\n", done.stderr


def test_a_hostile_decoder_is_one_line():
    code = (
        "from tokenizers import Tokenizer, Regex, decoders, models\n"
        "from qkv_cli.errors import QkvError\nfrom qkv_cli.text.tokens import decode\n"
        "tok = Tokenizer(models.WordLevel({'a': 0, '!': 1}, unk_token='!'))\n"
        "tok.decoder = decoders.Sequence([decoders.Fuse(), decoders.Replace(Regex('(a|aa)+$'), '')])\n"
        "try:\n    decode(tok, [0] * 40 + [1])\nexcept QkvError as exc:\n    print(exc)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "RUST_BACKTRACE": "1"})  # fmt: skip
    assert done.stderr == "" and "decoder failed" in done.stdout and "retry-limit" in done.stdout, done
