"""Seeded CLI fuzzing: random option values, random bytes and random unicode thrown at every command.

Whatever comes in, qkv answers with exit code 0 (it worked) or 2 (one clear line on stderr): never a traceback,
never an internal error (exit 1), and never a stray file in the working folder. Commands and their options are
read from the app itself, so a new command or option is fuzzed as soon as it exists. Reproduce one case with
`pytest tests/test_fuzz.py -k 'case17'`; the failure message prints its argument list.
"""

from __future__ import annotations

import enum
import random
import typing
from pathlib import Path

import pytest
import typer.main
from typer.testing import CliRunner

from qkv_cli.cli import app

SEED = 20_250_605
CASES = 200  # bounded: about 10 s in all
COMMANDS = typer.main.get_command(app).commands
OUTPUT_OPTIONS = ("out", "save_npz", "output", "save")  # options that name a file the command writes
NETWORK_OPTIONS = ("download",)  # never fuzzed: tests do not touch the network
MAX_MEMORY = "64MB"  # keeps random sizes from turning into long runs; the budget refuses the rest

WORDS = ["the", "cat", "sat", "on", "mat", "it", "was", "tired", "because", ",", ".", "l'animal", "3.50", "naïve"]
ODD = ["\x00", "\x01", "\x07", "\x1b[31m", "\x7f", "\u200b", "\u202e", "\ufeff", "\ud800", "e\u0301", "\U0001f600"]
ODD += ["\t", "\n", "\r\n", "\u2028", " ", "-", "--", "--d", "ﷺ", "𝔘𝔫𝔦", "中文", "עברית", "\\", "'", '"', "%s", "{}"]
INTS = [-5, -1, 0, 1, 1, 2, 2, 3, 4, 4, 7, 8, 8, 16, 64, 513, 4096, 10**6, 10**7, 2**31, 10**30]
BAD_INTS = ["x", "", "1.5", "nan", "0x10", "1e3", " 2", "٣"]
STRINGS = ["", " ", "auto", "none", "sqrt", "nan", "inf", "-inf", "1e308", "-1e-308", "0", "-2", "abc", "1,2"]
STRINGS += ["q,k,v", "weights", "scores,mask", "vectorized", "loop", "word", "bpe", "500MB", "0GB", "1e400", "-"]


def random_text(rng: random.Random) -> str:
    kind = rng.random()
    if kind < 0.5:  # words, with odd characters mixed in
        pieces = [rng.choice(WORDS) if rng.random() < 0.8 else rng.choice(ODD) for _ in range(rng.randint(0, 12))]
        return " ".join(pieces)
    if kind < 0.8:  # random code points from the whole range, surrogates and private use included
        return "".join(chr(rng.choice([rng.randint(0, 0x7F), rng.randint(0, 0xFFFF), rng.randint(0, 0x10FFFF)]))
                       for _ in range(rng.randint(0, 30)))  # fmt: skip
    return rng.choice(ODD) * rng.randint(0, 3)


def random_bytes(rng: random.Random) -> bytes:
    kind = rng.random()
    if kind < 0.35:
        return bytes(rng.randint(0, 255) for _ in range(rng.randint(0, 300)))
    if kind < 0.7:
        return random_text(rng).encode("utf-8", "surrogatepass")
    if kind < 0.8:
        return b"\xef\xbb\xbf" + " ".join(rng.choice(WORDS) for _ in range(8)).encode()
    if kind < 0.9:
        return "\n".join(" ".join(rng.choice(WORDS) for _ in range(5)) for _ in range(rng.randint(1, 4))).encode()
    return rng.choice([b"", b"\n\n", b"   ", b"\x00" * 10, b'{"model": ', b"[1, 2", b"\xff\xfe"])


def path_value(rng: random.Random, files: dict) -> str:
    return rng.choice([files["text"], files["bytes"], files["dir"], files["missing"], files["json"], "", "-", "."])


def output_value(rng: random.Random) -> str:
    return rng.choice(["fuzz.png", "fuzz.svg", "fuzz.pdf", "fuzz.npz", "fuzz.gif", "fuzz", "", ".", "adir",
                       "adir.png", "nowhere/x.png", "afile.txt/x.png", "-", "fuzz.PNG"])  # fmt: skip


def option_value(rng: random.Random, param, files: dict):
    """A random command-line value for `param`: often valid, often not."""
    annotation = param.type_descriptor.annotation
    base = [a for a in typing.get_args(annotation) if a is not type(None)] or [annotation]
    inner = typing.get_args(base[0])[0] if typing.get_origin(base[0]) is list else base[0]
    name = param.name
    if name in OUTPUT_OPTIONS:
        return output_value(rng)
    if ("file" in name or name in ("tokenizer", "model", "mask")) and rng.random() < 0.6:
        return path_value(rng, files)
    if isinstance(inner, type) and issubclass(inner, enum.Enum):
        choices = [e.value for e in inner]
        return rng.choice(choices) if rng.random() < 0.7 else rng.choice(["", "XML", choices[0].upper(), "none"])
    if inner is int:
        return str(rng.choice(INTS)) if rng.random() < 0.85 else rng.choice(BAD_INTS)
    if inner is float:
        return rng.choice(["0", "-1", "0.5", "1e308", "nan", "inf", "x"])
    return rng.choice(STRINGS) if rng.random() < 0.8 else random_text(rng)


VALID = {  # sensible values by option name, for the cases that should get past validation
    "d": ["8", "16", "32"], "tau": ["1", "2", "4"], "seed": ["0", "1", "12345"], "kernel": ["vectorized", "loop"],
    "window": ["1", "2", "5"], "scale": ["auto", "none", "sqrt", "0", "-1", "1e300", "1e-300"],
    "show": ["weights", "q,k,v", "scores,mask,output,heads,h"], "precision": ["0", "3"], "tokenizer": ["word", "bpe"],
    "head": ["0", "1"], "query": ["0", "1"], "m": ["1", "5"], "n": ["3"], "kv_heads": ["1", "2"],
    "out": ["fuzz.png", "fuzz.svg"], "save_npz": ["fuzz.npz"], "pad_to": ["20", "40"],
}  # fmt: skip


def valid_value(rng: random.Random, param):
    """A value that should be accepted, or None to leave the option out."""
    annotation = param.type_descriptor.annotation
    base = [a for a in typing.get_args(annotation) if a is not type(None)] or [annotation]
    if isinstance(base[0], type) and issubclass(base[0], enum.Enum):
        return rng.choice([e.value for e in base[0]])
    if param.name in VALID:
        return rng.choice(VALID[param.name])
    return None


def build_case(index: int, files: dict):
    """(args, stdin) for case `index`, reproducible from SEED alone.

    Two cases in five use sensible values for a few options (so the deeper code runs on random text); the rest
    throw random values, valid or not, at any option.
    """
    rng = random.Random(SEED * 1000 + index)
    sensible = rng.random() < 0.4
    name = sorted(COMMANDS)[index % len(COMMANDS)]
    command = COMMANDS[name]
    args, stdin = [name], None
    source = rng.random()
    if source < 0.45:
        args.append(random_text(rng) if not sensible else " ".join(rng.choice(WORDS) for _ in range(8)))
    elif source < 0.6:
        args.append("-")
        stdin = random_bytes(rng)
    elif source < 0.85:
        Path(files["bytes"]).write_bytes(random_bytes(rng))
        args += ["--file", files["bytes"]] if any("--file" in p.opts for p in command.params) else [files["bytes"]]
    for param in command.params:
        if not param.opts[0].startswith("-") or param.name in NETWORK_OPTIONS or param.name in ("help",):
            continue
        if param.name == "max_memory" and rng.random() < 0.85:
            args += [param.opts[0], MAX_MEMORY]
            continue
        if rng.random() > (0.25 if sensible else 0.12):
            continue
        if sensible:
            value = valid_value(rng, param)
            if getattr(param, "is_flag", False):
                args.append(param.opts[0])
            elif value is not None:
                args += [param.opts[0], value]
            continue
        if getattr(param, "is_flag", False):
            args.append(rng.choice(param.opts))
            continue
        repeats = rng.randint(1, 3) if getattr(param, "multiple", False) else 1
        for _ in range(repeats):
            args += [rng.choice(param.opts), option_value(rng, param, files)]
    if rng.random() < 0.05:
        args.append(rng.choice(["--no-such-option", "extra", "--", "-x"]))
    return args, stdin


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    work = tmp_path / "work"
    work.mkdir()
    (work / "adir").mkdir()
    (work / "adir.png").mkdir()
    (work / "afile.txt").write_text("do not touch")
    inputs = tmp_path / "inputs"
    inputs.mkdir()
    (inputs / "folder").mkdir()
    (inputs / "text.txt").write_text("The animal did not cross the street because it was tired.\n")
    (inputs / "tok.json").write_text('{"model": {"type": "BPE", "vocab": {}, "merges": []}')
    files = {"text": str(inputs / "text.txt"), "bytes": str(inputs / "random.bin"), "dir": str(inputs / "folder"),
             "missing": str(inputs / "missing.txt"), "json": str(inputs / "tok.json")}  # fmt: skip
    monkeypatch.chdir(work)
    monkeypatch.delenv("QKV_DEBUG", raising=False)
    return work, files


def written_by(args, command) -> set[str]:
    """The files a successful command may create: the values (or defaults) of its output options."""
    allowed = set()
    for param in COMMANDS[command].params:
        if param.name not in OUTPUT_OPTIONS:
            continue
        given = [args[i + 1] for i, a in enumerate(args[:-1]) if a in param.opts]
        for value in given or ([param.default] if isinstance(param.default, str) else []):
            allowed.add(str(Path(value)))
    return allowed


@pytest.mark.parametrize("index", range(CASES), ids=[f"case{i}" for i in range(CASES)])
def test_fuzz(index, workdir):
    work, files = workdir
    args, stdin = build_case(index, files)
    before = {str(p.relative_to(work)) for p in work.rglob("*")}
    result = CliRunner().invoke(app, args, input=stdin)
    where = f"qkv {args!r} (stdin={stdin!r:.60})"
    assert result.exit_code in (0, 2), f"{where}: exit {result.exit_code}: {result.output[-500:]!r}"
    assert "Traceback" not in result.output, where
    assert "internal error" not in result.stderr, f"{where}: {result.stderr!r}"
    if result.exit_code == 2:
        lines = result.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith("qkv: error: "), f"{where}: {result.stderr!r}"
    created = {str(p.relative_to(work)) for p in work.rglob("*")} - before
    allowed = written_by(args, args[0]) if result.exit_code == 0 else set()
    assert created <= allowed, f"{where}: stray files {sorted(created - allowed)}"
    assert (work / "afile.txt").read_text() == "do not touch"


def test_fuzz_reaches_every_command():
    """Every command, including ones added later, gets cases."""
    assert {sorted(COMMANDS)[i % len(COMMANDS)] for i in range(CASES)} == set(COMMANDS)
