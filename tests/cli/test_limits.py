"""Refusals happen before allocation, proved under an address-space limit; signals never leave a temporary file.

Each case runs the installed `qkv` in a subprocess whose address space is capped with resource.setrlimit
(RLIMIT_AS): a run that allocated what the input declares would die with MemoryError (an "out of memory" line, or
a crash), while a run refused from its estimate or the declared sizes says so in one line with exit 2. Nothing
here measures time: the signal tests wait for the run to be under way, then check what is left on disk.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from tiny import make_checkpoint

QKV = str(Path(sys.executable).with_name("qkv"))
LIMIT = 3 << 30  # 3 GiB of address space: Python, NumPy and the tokenizers fit; none of the declared sizes does
SAMPLE = Path(__file__).resolve().parents[2] / "sample_texts" / "long.txt"


def capped():
    resource.setrlimit(resource.RLIMIT_AS, (LIMIT, LIMIT))


def qkv(args, cwd, stdin=subprocess.DEVNULL):
    env = {**os.environ, "COLUMNS": "100", "NO_COLOR": "1", "OPENBLAS_NUM_THREADS": "1"}
    return subprocess.run([QKV, *map(str, args)], cwd=cwd, stdin=stdin, capture_output=True, text=True,
                          env=env, preexec_fn=capped, timeout=120)  # fmt: skip


def refused(proc, *fragments):
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-500:])
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("qkv: error: "), lines
    assert "out of memory" not in lines[0].lower() and "MemoryError" not in proc.stderr, lines
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def huge_mask(folder: Path) -> Path:
    """A 1 TB boolean .npy mask in a few hundred bytes: only its header declares (10^6, 10^6)."""
    path = folder / "huge.npy"
    header = {"descr": "|b1", "fortran_order": False, "shape": (10**6, 10**6)}
    with open(path, "wb") as f:
        np.lib.format.write_array_header_1_0(f, header)
        f.write(b"\x01" * 16)
    return path


CASES = {  # name -> (args given the folder, fragments of the one-line refusal)
    "npy mask declaring 10^6 x 10^6": (lambda d: ["run", "the cat sat", "--mask-file", huge_mask(d)], []),
    "num_hidden_layers 10^12": (
        lambda d: ["run", "the cat", "--model", make_checkpoint(d / "m", "gpt2", config_overrides={"n_layer": 10**12})],
        [],
    ),
    "num_hidden_layers 10^6 (bert)": (
        lambda d: [
            "run",
            "the cat",
            "--model",
            make_checkpoint(d / "b", "bert", config_overrides={"num_hidden_layers": 10**6}),
        ],  # fmt: skip
        [],
    ),
    "a text far over the budget": (lambda d: ["run", "--file", SAMPLE, "--d", "4096", "--tau", "64"], ["needs"]),
    "every line of heads --file kept": (
        lambda d: ["heads", "--file", lines(d, 300, 300), "--max-memory", "100MB", "--d", "256", "--tau", "8"],
        ["needs"],
    ),
    "a batch of one long line and many short": (
        lambda d: ["run", "--file", batch(d), "--batch", "--max-memory", "200MB", "--d", "256", "--tau", "8"],
        ["needs"],
    ),
    "/dev/zero as the text": (lambda d: ["run", "--file", "/dev/zero"], ["at most"]),
    "/dev/zero as a mask": (lambda d: ["run", "the cat", "--mask-file", "/dev/zero"], ["at most"]),
}


def lines(folder: Path, count: int, words: int) -> Path:
    path = folder / "lines.txt"
    path.write_text("\n".join(" ".join(f"w{i}x{j}" for j in range(words)) for i in range(count)) + "\n")
    return path


def batch(folder: Path) -> Path:
    path = folder / "batch.txt"
    path.write_text(" ".join(f"w{j}" for j in range(3000)) + "\n" + "short line here\n" * 2000)
    return path


@pytest.mark.parametrize("name", list(CASES))
def test_refused_before_allocating_under_an_address_space_limit(name, tmp_path):
    make_args, fragments = CASES[name]
    refused(qkv(make_args(tmp_path), tmp_path), *fragments)


def test_stdin_is_capped_under_an_address_space_limit(tmp_path):
    with open("/dev/zero", "rb") as zero:
        refused(qkv(["run", "-"], tmp_path, stdin=zero), "stdin", "at most")


def started(folder: Path, target: str, proc, patience: float = 60.0) -> bool:
    """Wait (bounded) until the run is writing: a temporary file beside the target, or the run has ended."""
    end = time.monotonic() + patience
    while time.monotonic() < end and proc.poll() is None:
        if any(p.name.endswith(".tmp") for p in folder.iterdir()):
            return True
        time.sleep(0.005)
    return False


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT], ids=["TERM", "HUP", "INT"])
def test_a_signal_while_writing_leaves_no_temporary_file(signum, tmp_path):
    text = tmp_path.parent / f"{tmp_path.name}.txt"  # outside the folder that is checked
    text.write_text(" ".join(f"w{j % 97}" for j in range(900)))
    args = [QKV, "run", "--file", text, "--d", "256", "--tau", "8", "--save-npz", "big.npz"]
    proc = subprocess.Popen(args, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        if started(tmp_path, "big.npz", proc):
            proc.send_signal(signum)
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert "Traceback" not in err, err
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left in ([], ["big.npz"]), left  # nothing half-written: no temporary file, the target whole or absent
    if left:
        with np.load(tmp_path / "big.npz", allow_pickle=False) as z:  # the run finished before the signal: whole
            assert "weights" in z.files


def loaded(pid: int, library: str, proc, patience: float = 60.0) -> bool:
    """Wait (bounded) until the process has mapped a shared library whose path holds `library`, or has ended."""
    end = time.monotonic() + patience
    while time.monotonic() < end and proc.poll() is None:
        try:
            if library in Path(f"/proc/{pid}/maps").read_text():
                return True
        except OSError:
            return False
        time.sleep(0.001)
    return False


@pytest.mark.parametrize("library", ["pydantic_core", "numpy", "tokenizers"])
def test_an_early_interrupt_prints_one_line(library, tmp_path):
    """Ctrl-C while qkv is still importing (typer's pydantic, NumPy, the tokenizer): one line, never a traceback."""
    proc = subprocess.Popen([QKV, "run", "the cat sat"], cwd=tmp_path, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip
    if loaded(proc.pid, library, proc):
        proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert len(err.splitlines()) <= 1, err
    assert proc.returncode in (0, 130), (proc.returncode, err)


def test_models_lists_good_entries_beside_a_bad_one(tmp_path):
    hub = tmp_path / "hub"
    good = hub / "models--org--good" / "snapshots" / "abc"
    make_checkpoint(good, "bert")
    (hub / "models--org--good" / "refs").mkdir()
    (hub / "models--org--good" / "refs" / "main").write_text("abc")
    listed = make_checkpoint(hub / "models--org--listed" / "snapshots" / "abc", "bert")
    (listed / "config.json").write_text(json.dumps({"model_type": ["bert"]}))  # a list: not a model_type
    (hub / "models--org--listed" / "refs").mkdir()
    (hub / "models--org--listed" / "refs" / "main").write_text("abc")
    make_checkpoint(hub / "models--org--binary" / "snapshots" / "abc", "bert")
    (hub / "models--org--binary" / "refs").mkdir()
    (hub / "models--org--binary" / "refs" / "main").write_bytes(b"\xff\xfe\x00\x1b[2J")  # not a commit name
    env = {**os.environ, "HF_HUB_CACHE": str(hub), "COLUMNS": "200", "NO_COLOR": "1"}
    proc = subprocess.run([QKV, "models", "--format", "json"], cwd=tmp_path, capture_output=True, text=True, env=env)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    rows = {row["name"]: row for row in json.loads(proc.stdout)}
    assert rows["org/good"]["error"] is None and rows["org/good"]["family"] == "bert"
    assert rows["org/listed"]["error"], rows  # marked, with why
    assert "org/binary" in rows  # its only snapshot, or marked: never the end of the listing
    table = subprocess.run([QKV, "models"], cwd=tmp_path, capture_output=True, text=True, env=env)
    assert table.returncode == 0 and "org/good" in table.stdout and "\x1b" not in table.stdout


def test_a_link_to_stdout_is_not_replaced(tmp_path):
    """--save-npz through /proc/self/fd/1 with stdout redirected to a file: refused, the file keeps the output."""
    (tmp_path / "link.npz").symlink_to("/proc/self/fd/1")
    with open(tmp_path / "stdout.txt", "w") as out:
        proc = subprocess.run([QKV, "run", "the cat", "--save-npz", "link.npz"], cwd=tmp_path, stdout=out,
                              stderr=subprocess.PIPE, text=True, timeout=60)  # fmt: skip
    assert proc.returncode == 2 and "standard output" in proc.stderr, proc.stderr
    assert (tmp_path / "stdout.txt").read_bytes()[:2] != b"PK"  # not replaced by a zip
