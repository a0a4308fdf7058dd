"""Every bad input gets exactly one line `qkv: error: ...` on stderr, exit code 2, and nothing is written.

Each case is (args, fragments): the fragments name the offending value and what would be accepted.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from clitools import SMALL, assert_one_line_error, files_in, invoke

# ---- sizes ----------------------------------------------------------------------------------------------

SIZES = [
    (["run", "hi", "--d", "0"], ["--d", "'0'", "greater than or equal to 1"]),
    (["run", "hi", "--d", "-8"], ["--d", "'-8'", "greater than or equal to 1"]),
    (["run", "hi", "--tau", "0"], ["--heads", "'0'", "greater than or equal to 1"]),
    (["run", "hi", "--tau", "-1"], ["'-1'", "greater than or equal to 1"]),
    (["run", "hi", "--d", "10000000"], ["d (10000000)", "at most 1048576"]),
    (["run", "hi", "--d", str(10**40)], [str(10**40), "at most"]),
    (["run", "hi", "--d", "10", "--tau", "3"], ["d (10)", "divisible by tau (3)"]),
    (["run", "hi", "--d", "4", "--tau", "8"], ["tau (8)", "cannot exceed d (4)"]),
    (["run", "hi", "--d", "12", "--tau", "5000000"], ["tau (5000000)", "at most"]),
    (["run", "hi", "--window", "0", *SMALL], ["--window", "'0'", "greater than or equal to 1"]),
    (["run", "hi", "--window", "-1", *SMALL], ["--window", "'-1'", "greater than or equal to 1"]),
    (["run", "hi", "--head", "99", *SMALL], ["--head 99", "0..1"]),
    (["run", "hi", "--head", "-1"], ["--head -1", "0..7"]),
    (["run", "hi", "--head", "x"], ["--head", "'x'", "integer"]),
    (["run", "hi", "--kv-heads", "3"], ["--kv-heads (3)", "divide tau (8)", "1, 2, 4, 8"]),
    (["run", "hi", "--kv-heads", "0"], ["--kv-heads", "0"]),
    (["run", "hi", "--d", "abc"], ["--d", "'abc'", "integer"]),
    (["run", "hi", "--d", "1.5"], ["--d", "'1.5'", "integer"]),
    (["run", "hi", "--precision", "99", *SMALL], ["--precision", "'99'", "less than or equal to 12"]),
    (["run", "hi", "--seed", "-1", *SMALL], ["--seed", "'-1'", "greater than or equal to 0"]),
    (["heatmap", "hi", "--head", "8"], ["--head 8", "0..7"]),
    (["heatmap", "hi", "--d", "9", "--tau", "2"], ["d (9)", "divisible by tau (2)"]),
    (["shapes", "--d", "10", "--tau", "3"], ["d (10)", "divisible by tau (3)"]),
    (["shapes", "--d", "0"], ["--d", "'0'", "greater than or equal to 1"]),
    (["shapes", "--m", "0"], ["--m", "'0'", "greater than or equal to 1"]),
    (["shapes", "--m", "-5"], ["--m", "'-5'"]),
    (["shapes", "--d", "99999999"], ["d (99999999)", "at most"]),
    (["run", "hi", "--tau", str(10**30)], [f"tau ({10**30})", "at most 1048576"]),
    (["heatmap", "hi", "--tau", str(10**30)], [f"tau ({10**30})", "at most 1048576"]),
    (["heatmap", "hi", "--d", "64", "--tau", "64"], ["64 panels", "at most 16", "--head"]),
    (["mask", "the cat", "--pad-to", "100000"], ["100000 x 100000", "at most 4194304", "--pad-to"]),
    (["mask", "the cat", "--pad-to", str(10**15)], [str(10**15), "at most 4194304"]),
]


@pytest.mark.parametrize("args,fragments", SIZES, ids=[" ".join(a)[:60] for a, _ in SIZES])
def test_sizes(args, fragments, in_tmp):
    assert_one_line_error(invoke(args), *fragments)
    assert files_in(in_tmp) == set()


# ---- choices and values ---------------------------------------------------------------------------------

CHOICES = [
    (["run", "hi", "--kernel", "fast"], ["'fast'", "vectorized, loop"]),
    (["run", "hi", "--kernel", ""], ["''", "vectorized, loop"]),
    (["run", "hi", "--dtype", "float16"], ["'float16'", "float64", "float32"]),
    (["run", "hi", "--format", "xml"], ["'xml'", "table", "json", "csv"]),
    (["run", "hi", "--positions", "learned"], ["'learned'", "sinusoidal", "none"]),
    (["run", "hi", "--projection", "learned"], ["'learned'", "random", "identity"]),
    (["run", "hi", "--scale", "abc"], ["'abc'", "auto, none, sqrt or a finite number"]),
    (["run", "hi", "--scale", ""], ["''", "auto, none, sqrt or a finite number"]),
    (["run", "hi", "--scale", "nan"], ["'nan'", "finite number"]),
    (["run", "hi", "--scale", "inf"], ["'inf'", "finite number"]),
    (["run", "hi", "--scale", "-inf"], ["'-inf'", "finite number"]),
    (["run", "hi", "--scale", "1e999"], ["'1e999'", "finite number"]),
    (["run", "hi", "--show", "attention"], ["'attention'", "q, k, v, scores, mask, weights, output"]),
    (["run", "hi", "--show", ","], ["','", "weights"]),
    (["run", "hi", "--max-memory", "lots"], ["'lots'", "500MB, 4GB or 2GiB"]),
    (["run", "hi", "--max-memory", "0"], ["'0'", "500MB"]),
    (["run", "hi", "--max-memory", "-5GB"], ["'-5GB'", "500MB"]),
    (["run", "hi", "--max-memory", "1e400"], ["'1e400'", "500MB"]),
    (["run", "hi", "--max-memory", "4 parsecs"], ["'4 parsecs'", "500MB"]),
    (["run", "hi", "--bogus"], ["--bogus", "qkv run --help"]),
    (["frobnicate"], ["'frobnicate'", "qkv --help"]),
    (["heatmap", "hi", "--scale", "nan"], ["'nan'", "finite number"]),
    (["shapes", "--format", "yaml"], ["'yaml'", "table"]),
    (["shapes", "--format", "csv"], ["'csv' is not one of 'table', 'json'"]),  # shapes offers no csv
    (["shapes", "--dtype", "int8"], ["'int8'", "float64"]),
]


@pytest.mark.parametrize("args,fragments", CHOICES, ids=[" ".join(a)[:60] for a, _ in CHOICES])
def test_choices_and_values(args, fragments, in_tmp):
    assert_one_line_error(invoke(args), *fragments)
    assert files_in(in_tmp) == set()


@pytest.mark.parametrize("scale", ["0", "-1", "-0.5", "1e-300", "1e300", "-1e300", "sqrt", "none", "auto"])
def test_zero_negative_and_extreme_scales_are_legitimate(scale):
    result = invoke(["run", "the cat sat", *SMALL, "--scale", scale, "--format", "json"])
    assert result.exit_code == 0, result.output
    assert result.stderr == ""


# ---- text -----------------------------------------------------------------------------------------------


def write(folder: Path, name: str, data: bytes) -> str:
    path = folder / name
    path.write_bytes(data)
    return str(path)


TEXTS = [
    (["run", ""], {}, ["TEXT is empty", "give some text"]),
    (["run", "   \n\t  "], {}, ["TEXT is empty", "give some text"]),
    (["run", "\x00\x01\x1b\x7f"], {}, ["TEXT is empty", "give some text"]),
    (["run", "\u200b\u202e"], {}, ["TEXT is empty", "give some text"]),
    (["run", "-"], {"input": ""}, ["stdin is empty", "give some text"]),
    (["run", "-"], {"input": "  \n "}, ["stdin is empty", "give some text"]),
    (["run", "--file", "-"], {"input": ""}, ["stdin is empty", "give some text"]),
    (["run", "-"], {"input": b"caf\xe9"}, ["stdin is not UTF-8", "offset 3", "convert it to UTF-8"]),
    (["run", "hi", "--file", "{empty}"], {}, ["either TEXT or --file"]),
    (["run", "--file", "{missing}"], {}, ["'{missing}' does not exist"]),
    (["run", "--file", "{folder}"], {}, ["'{folder}' is a directory", "give a text file"]),
    (["run", "--file", "{empty}"], {}, ["'{empty}' is empty", "give some text"]),
    (["run", "--file", "{blank}"], {}, ["'{blank}' is empty", "give some text"]),
    (["run", "--file", "{binary}"], {}, ["'{binary}' looks binary", "give UTF-8 text"]),
    (["run", "--file", "{latin1}"], {}, ["'{latin1}' is not UTF-8", "offset 3", "convert it to UTF-8"]),
    (["run", "--file", "{controls}"], {}, ["'{controls}' is empty", "give some text"]),
    (["heatmap", "--file", "{binary}"], {}, ["'{binary}' looks binary"]),
    (["run", "--file", ""], {}, ["file ''", "not a file name"]),
    (["run", "--file", "a\x00b.txt"], {}, ["'a\\x00b.txt'", "not a file name"]),
    (["run", "--file", "a\ud800.txt"], {}, ["'a\\ud800.txt'", "not a file name"]),
    (["run", "hi", "--context-file", "c\x00"], {}, ["--context-file 'c\\x00'", "not a file name"]),
    (["run", "hi", "--mask-file", ""], {}, ["--mask-file ''", "not a file name"]),
    (["run", "hi", "--mask-file", "{missing}"], {}, ["--mask-file '{missing}' does not exist"]),
    (["run", "hi", "--kernel", "\x1b[31mred"], {}, ["'\\x1b[31mred'", "vectorized, loop"]),
    (["shapes", ""], {}, ["TEXT is empty"]),
    (["shapes", "-"], {"input": ""}, ["stdin is empty"]),
]


@pytest.fixture
def text_files(tmp_path):
    folder = tmp_path / "inputs"
    folder.mkdir()
    (folder / "adir").mkdir()
    return {
        "empty": write(folder, "empty.txt", b""),
        "blank": write(folder, "blank.txt", b" \n\t\r\n  \n"),
        "binary": write(folder, "binary.bin", bytes(range(256)) * 4),
        "latin1": write(folder, "latin1.txt", "café au lait".encode("latin-1")),
        "controls": write(folder, "controls.txt", b"\x01\x02\x03\x1b\x7f\x0b\x0c\r\n"),
        "missing": str(folder / "missing.txt"),
        "folder": str(folder / "adir"),
    }


@pytest.mark.parametrize("args,kwargs,fragments", TEXTS, ids=[" ".join(a)[:40] + str(k)[:20] for a, k, _ in TEXTS])
def test_text(args, kwargs, fragments, text_files, in_tmp):
    before = files_in(in_tmp)
    args = [a.format(**text_files) for a in args]
    line = assert_one_line_error(invoke(args, **kwargs), *[f.format(**text_files) for f in fragments])
    assert "\x00" not in line and "\x1b" not in line
    assert files_in(in_tmp) == before


def test_unreadable_file(tmp_path, monkeypatch):
    path = tmp_path / "secret.txt"
    path.write_text("the cat sat")
    if os.geteuid() == 0:  # root reads through chmod 000: simulate the refusal instead
        from qkv_cli.text import inputs

        def refuse(file, *args, **kwargs):
            if Path(file) == path:
                raise PermissionError(13, "Permission denied", str(file))
            return open(file, *args, **kwargs)

        monkeypatch.setattr(inputs, "open", refuse, raising=False)
    else:
        path.chmod(0)
    try:
        assert_one_line_error(invoke(["run", "--file", path, *SMALL]), str(path), "not readable")
    finally:
        path.chmod(0o644)


def test_file_that_fails_to_read(tmp_path, monkeypatch):
    """Any other OSError (an I/O error on a bad disk, a FIFO gone away) is one line too."""
    path = tmp_path / "flaky.txt"
    path.write_text("the cat sat")
    from qkv_cli.text import inputs

    monkeypatch.setattr(inputs, "open", lambda *a, **k: (_ for _ in ()).throw(OSError(5, "Input/output error")),
                        raising=False)  # fmt: skip
    assert_one_line_error(invoke(["run", "--file", path, *SMALL]), str(path), "Input/output error")


def test_closed_stdin_through_the_installed_command(tmp_path):
    """stdin closed (fd 0 not open at all): one line, exit 2 - through the real `qkv` entry point once."""
    exe = shutil.which("qkv", path=os.path.dirname(sys.executable)) or shutil.which("qkv")
    assert exe is not None, "the qkv entry point is not installed (pip install -e '.[test]')"
    proc = subprocess.run([exe, "run", "-", *SMALL], cwd=tmp_path, capture_output=True, text=True, timeout=60,
                          preexec_fn=lambda: os.close(0))  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines() == ["qkv: error: stdin is closed: pass TEXT, --file PATH, or pipe text into '-'"]
    assert proc.stdout == ""
    assert list(tmp_path.iterdir()) == []


ACCEPTED_TEXTS = [
    "the\x00cat\x07sat\x1b[31m on the mat",  # control characters become spaces
    "e\u0301\u200d\U0001f600 \ufeff text",  # combining marks, joiners, emoji, a stray BOM
    "word " * 3000,  # a long line
    "x" * 100_000,  # one enormous token
    "\ud800 lone surrogate",  # cannot be encoded to UTF-8
]


@pytest.mark.parametrize("text", ACCEPTED_TEXTS, ids=["controls", "unicode", "long-line", "huge-token", "surrogate"])
@pytest.mark.parametrize("tokenizer", ["word", "bpe"])
def test_odd_but_valid_text_runs_or_is_refused_cleanly(text, tokenizer):
    result = invoke(["run", text, *SMALL, "--tokenizer", tokenizer, "--format", "json", "--show", "output"])
    assert result.exit_code in (0, 2), result.output
    if result.exit_code == 0:
        doc = json.loads(result.stdout)
        assert len(doc["tokens"]) >= 1
    else:
        assert_one_line_error(result)


@pytest.mark.parametrize("command", ["run", "heatmap", "mask", "explain"])
def test_huge_window_is_plain_causal(command, in_tmp):
    """A window of 10**30 keys is legitimate (it equals --causal); it must not overflow int64."""
    extra = [] if command == "mask" else SMALL + (["--head", "0"] if command == "heatmap" else [])
    result = invoke([command, "the cat sat", "--window", str(10**30), *extra])
    assert result.exit_code == 0, result.output


def test_grouped_query_csv_and_json_for_any_shown_head():
    base = ["run", "the cat sat", "--d", "8", "--tau", "4", "--kv-heads", "2", "--show", "q,k,v"]
    for fmt in ("csv", "json", "table"):
        for head in ([], ["--head", "3"]):
            result = invoke([*base, "--format", fmt, *head])
            assert result.exit_code == 0, (fmt, head, result.output)
    rows = invoke([*base, "--format", "csv", "--head", "3"]).stdout.splitlines()[1:]
    assert {tuple(r.split(",")[:2]) for r in rows} == {("Q", "3"), ("K", "1"), ("V", "1")}  # head 3 reads K/V 1


def test_long_line_file_is_read(tmp_path):
    path = tmp_path / "long.txt"
    path.write_text(" ".join(f"w{i % 97}" for i in range(2000)))  # one 10 KB line
    result = invoke(["run", "--file", path, *SMALL, "--head", "0"])
    assert result.exit_code == 0, result.output
    assert "showing 48 of 2000 rows" in result.stdout  # long inputs are windowed, not wrapped into noise
    assert max(len(line) for line in result.stdout.splitlines()) <= 120


# ---- tokenizers -----------------------------------------------------------------------------------------


@pytest.fixture
def tokenizer_files(tmp_path):
    from qkv_cli.text.tokens import BPE_PATH

    folder = tmp_path / "tok"
    folder.mkdir()
    (folder / "nojson").mkdir()
    good = BPE_PATH.read_bytes()
    return {
        "truncated": write(folder, "truncated.json", good[: len(good) // 2]),
        "empty": write(folder, "empty.json", b""),
        "notjson": write(folder, "notjson.json", b"vocab = {}"),
        "wrongjson": write(folder, "wrong.json", b'{"vocab": {"a": 1}}'),
        "list": write(folder, "list.json", b"[1, 2, 3]"),
        "badmodel": write(folder, "badmodel.json", json.dumps({"model": {"type": "Nope"}}).encode()),
        "binary": write(folder, "binary.json", b"\xff\xfe\x00\x01" * 64),
        "missing": str(folder / "missing.json"),
        "nojson": str(folder / "nojson"),
    }


TOKENIZERS = [
    ("words", ["unknown tokenizer 'words'", "word, bpe or a path to a tokenizer.json"]),
    ("{missing}", ["'{missing}' does not exist", "tokenizer.json"]),
    ("{truncated}", ["'{truncated}' is not valid JSON", "expected a Hugging Face tokenizer.json"]),
    ("{empty}", ["'{empty}' is empty", "expected a Hugging Face tokenizer.json"]),
    ("{notjson}", ["'{notjson}' is not valid JSON", "Hugging Face tokenizer.json"]),
    ("{wrongjson}", ["'{wrongjson}'", "not a Hugging Face tokenizer.json"]),
    ("{list}", ["'{list}'", "not a Hugging Face tokenizer.json"]),
    ("{badmodel}", ["'{badmodel}'", "Hugging Face tokenizer.json"]),
    ("{binary}", ["'{binary}' is not UTF-8"]),
    ("{nojson}", ["no tokenizer.json in folder '{nojson}'", "give a tokenizer.json file or its folder"]),
]


@pytest.mark.parametrize("spec,fragments", TOKENIZERS, ids=[s for s, _ in TOKENIZERS])
@pytest.mark.parametrize("command", ["run", "heatmap", "shapes"])
def test_tokenizers(command, spec, fragments, tokenizer_files, in_tmp):
    before = files_in(in_tmp)
    spec = spec.format(**tokenizer_files)
    args = [command, "the cat sat", "--tokenizer", spec] + (SMALL if command != "shapes" else [])
    assert_one_line_error(invoke(args), *[f.format(**tokenizer_files) for f in fragments])
    assert files_in(in_tmp) == before


# ---- the error line itself ------------------------------------------------------------------------------


def test_internal_errors_are_one_line_with_exit_1(monkeypatch):
    """A bug (not a user error) still gives one line, but exit code 1, so it is not mistaken for bad input."""
    import qkv_cli.pipeline.seeded

    monkeypatch.delenv("QKV_DEBUG", raising=False)
    monkeypatch.setattr(qkv_cli.pipeline.seeded, "run", lambda *a, **k: {}["boom"])
    result = invoke(["run", "hi", *SMALL])
    assert result.exit_code == 1
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("qkv: error: internal error: KeyError")
    assert "QKV_DEBUG=1" in lines[0]


def test_memory_error_is_one_line(monkeypatch):
    import qkv_cli.pipeline.seeded

    def oom(*args, **kwargs):
        raise MemoryError

    monkeypatch.setattr(qkv_cli.pipeline.seeded, "run", oom)
    assert_one_line_error(invoke(["run", "hi", *SMALL]), "out of memory", "--dtype float32")


def test_multi_line_messages_are_joined():
    """A message with newlines (from a library) still reaches the user as one line."""
    from qkv_cli.cli import fail

    class Capture:
        text = ""

        def write(self, s):
            self.text += s

        def flush(self):
            pass

    capture = Capture()
    real, sys.stderr = sys.stderr, capture
    try:
        assert fail("first\nsecond\r\n  third") == 2
    finally:
        sys.stderr = real
    assert capture.text == "qkv: error: first second third\n"


def test_no_arguments_prints_help():
    result = invoke([])
    assert result.exit_code == 0
    assert "Usage:" in result.stdout and "run" in result.stdout


def test_help_and_version_exit_0():
    for args in (["--help"], ["run", "--help"], ["heatmap", "-h"], ["shapes", "--help"], ["--version"]):
        result = invoke(args)
        assert result.exit_code == 0, (args, result.output)
        assert result.stderr == ""
