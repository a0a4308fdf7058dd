"""`qkv scan` from the command line: a real scan process killed (SIGKILL, SIGINT) at random moments and resumed
equals an uninterrupted scan row for row; bad input is one line and exit 2; the table, figure and page."""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from clitools import assert_one_line_error, invoke
from scanning import SENTENCES, corpus_file, require
from tiny import make_checkpoint

import qkv_cli as qkv

NEXT_TO_PYTHON = Path(sys.executable).with_name("qkv")
QKV = str(NEXT_TO_PYTHON) if NEXT_TO_PYTHON.exists() else "qkv"


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return make_checkpoint(tmp_path_factory.mktemp("qwen3"), "qwen3")


def lines(n):  # n varied texts of tiny.WORDS, some unreadable (empty)
    return [SENTENCES[i % 10] + " ." * (i % 3) if i % 97 != 5 else "" for i in range(n)]


def shards(out) -> int:
    return len(list(out.glob("part-*.parquet"))) if out.is_dir() else 0


def test_a_killed_scan_resumes_to_the_uninterrupted_table(model, tmp_path):
    """SIGKILL or SIGINT at a random moment, again and again, each time resumed; then the final table holds every
    text exactly once and equals the scan that ran without a stop (and no temporary file is left)."""
    require("pyarrow")
    corpus = corpus_file(tmp_path, lines(700))
    whole = qkv.scan(corpus, model=str(model), out=tmp_path / "whole", shard_size=5).table
    out = tmp_path / "killed"
    args = [QKV, "scan", str(corpus), "--model", str(model), "--out", str(out), "--shard-size", "5"]
    rng, stops, hints = random.Random(35), 0, 0
    for attempt in range(6):
        proc = subprocess.Popen(args + (["--resume"] if attempt else []), stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True)  # fmt: skip
        target = shards(out) + rng.randint(1, 3)  # a random moment: 1 to 3 shards on, then within the next one
        while shards(out) < target and proc.poll() is None:  # (progress, not time: the machine's speed varies)
            time.sleep(0.01)
        time.sleep(rng.uniform(0.0, 0.05))
        sig = signal.SIGKILL if attempt % 2 == 0 else signal.SIGINT
        if proc.poll() is not None:  # finished before the stop
            break
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
        stops += 1
        if sig == signal.SIGINT:
            assert proc.returncode == 130 and len(err.splitlines()) == 1 and err.startswith("qkv: error: interrupted")
            hints += "--resume" in err
        else:
            assert proc.returncode == -signal.SIGKILL
    assert stops >= 3, "the scan finished before it could be stopped three times"
    done = subprocess.run(args + ["--resume"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    table = qkv.scan(corpus, model=str(model), out=out, shard_size=5, resume=True).table  # nothing left to do
    assert table.equals(whole)
    ids = table.column("text_id").to_pylist()
    assert len(ids) == len(set(zip(ids, table.column("layer").to_pylist(), table.column("head").to_pylist(),
                                   strict=True)))  # fmt: skip
    assert not [p.name for p in out.iterdir() if p.name.endswith(".tmp")]
    assert hints >= 1, "no SIGINT landed after the scan started: none printed how to resume"


def test_the_table_and_json(model, tmp_path):
    require("pyarrow")
    corpus = corpus_file(tmp_path, SENTENCES)
    result = invoke(["scan", corpus, "--model", model, "--out", tmp_path / "s", "--to", "the,.", "--top", "2"])
    assert result.exit_code == 0, result.output
    assert "10 texts scanned of 10 read" in result.stdout and "to_the" in result.stdout
    assert "scanning" not in result.stdout  # no progress bar off a terminal
    assert {p.name for p in (tmp_path / "s").iterdir()} == {"scan.json", "summary.json", "part-000000.parquet"}
    again = invoke(["scan", corpus, "--model", model, "--out", tmp_path / "s", "--resume", "--to", "the,.",
                    "--format", "json"])  # fmt: skip
    assert again.exit_code == 0 and '"texts": 10' in again.stdout


def test_heatmap_and_page(model, tmp_path):
    require("pyarrow")
    corpus = corpus_file(tmp_path, SENTENCES)
    png, page = tmp_path / "h.png", tmp_path / "p.html"
    args = ["scan", corpus, "--model", model, "--out", tmp_path / "s", "--heatmap", png, "--page", page]
    result = invoke(args + ["--score", "induction"])
    assert result.exit_code == 0, result.output
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    html = page.read_text()
    assert "Content-Security-Policy" in html and '"score":"induction"' in html
    assert "http" not in html.split("<script")[1]  # nothing fetched


@pytest.mark.parametrize(
    "args, fragments",
    [
        (["--detectors", "inductoin"], ["unknown score 'inductoin'", "did you mean 'induction'"]),
        (["--strict"], ["--strict", "--max-tokens"]),
        (["--ray-address", "auto"], ["--engine ray"]),
        (["--heatmap", "h.png", "--score", "prevous"], ["--score 'prevous'", "did you mean 'previous'"]),
        (["--heatmap", "h.txt"], ["extension"]),
        (["--to", ""], ["--to", "names no token"]),
    ],
)
def test_bad_options_are_one_line(model, tmp_path, monkeypatch, args, fragments):
    require("pyarrow")
    monkeypatch.chdir(tmp_path)
    corpus = corpus_file(tmp_path, SENTENCES[:2])
    result = invoke(["scan", corpus, "--model", model, "--out", tmp_path / "s", *args])
    assert_one_line_error(result, *fragments)


def test_bad_corpora_and_folders_are_one_line(model, tmp_path):
    require("pyarrow")
    binary = tmp_path / "b.txt"
    binary.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00")
    (tmp_path / "empty").mkdir()
    unreadable = corpus_file(tmp_path, ["", "   "], "blank.txt")
    cases = [(binary, "looks binary"), (tmp_path / "empty", "no .txt files"), (unreadable, "no readable text")]
    for i, (corpus, fragment) in enumerate(cases):
        result = invoke(["scan", corpus, "--model", model, "--out", tmp_path / f"o{i}"])
        assert_one_line_error(result, fragment)
    good = corpus_file(tmp_path, SENTENCES[:2])
    assert invoke(["scan", good, "--model", model, "--out", tmp_path / "s"]).exit_code == 0
    assert_one_line_error(invoke(["scan", good, "--model", model, "--out", tmp_path / "s"]), "add --resume")
    changed = invoke(["scan", good, "--model", model, "--out", tmp_path / "s", "--resume", "--to", "the"])
    assert_one_line_error(changed, "other settings", "columns")
    assert_one_line_error(invoke(["scan", good, "--model", model, "--out", binary]), "is a file")
    stdin = invoke(["scan", "-", "--model", model, "--out", tmp_path / "p", "--page", tmp_path / "p.html"])
    assert_one_line_error(stdin, "--page", "not '-'")


def test_without_pyarrow_one_line_says_what_to_install(model, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    result = invoke(["scan", corpus_file(tmp_path, SENTENCES[:2]), "--model", model, "--out", tmp_path / "s"])
    assert_one_line_error(result, "pip install 'qkv-cli[scan]'")
