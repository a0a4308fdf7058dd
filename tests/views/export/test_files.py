"""A failure while writing never leaves a partial file and never clobbers the old one."""

from __future__ import annotations

import os
import stat

import numpy as np
import pytest
from typer.testing import CliRunner

from qkv_cli.cli import app
from qkv_cli.errors import QkvError
from qkv_cli.views.export.writing import atomic_write

SMALL = ["--d", "8", "--tau", "2"]
OLD = b"the previous file, which must survive"


def invoke(args):
    return CliRunner().invoke(app, [str(a) for a in args])


@pytest.fixture
def in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


def half_then(exc):
    """A replacement for savefig / write_array: write some bytes to the handle, then fail with `exc`."""

    def write(target, *args, **kwargs):
        handle = target if hasattr(target, "write") else args[0]
        handle.write(b"\x89PNG partial bytes")
        handle.flush()
        raise exc

    return write


def break_savefig(monkeypatch, exc):
    from matplotlib.figure import Figure

    write = half_then(exc)
    monkeypatch.setattr(Figure, "savefig", lambda self, fname, *a, **k: write(fname))


def break_savez(monkeypatch, exc):  # save_npz writes each array with np.lib.format.write_array into the zip
    write = half_then(exc)
    monkeypatch.setattr(np.lib.format, "write_array", lambda fp, *a, **k: write(fp))


CASES = [
    ("heatmap", "old.png", break_savefig, OSError(28, "No space left on device"), 2, "No space left on device"),
    ("heatmap", "old.svg", break_savefig, RuntimeError("renderer crashed"), 1, "renderer crashed"),
    ("heatmap", "old.pdf", break_savefig, QkvError("refused mid-write"), 2, "refused mid-write"),
    ("run", "old.npz", break_savez, OSError(5, "Input/output error"), 2, "Input/output error"),
    ("run", "old.npz", break_savez, ValueError("bad array"), 1, "bad array"),
]


@pytest.mark.parametrize(
    "command,name,breaker,exc,code,fragment", CASES, ids=[f"{c[1]}-{type(c[3]).__name__}" for c in CASES]
)
def test_failed_write_keeps_the_old_file_and_leaves_no_temp(command, name, breaker, exc, code, fragment, in_tmp,
                                                           monkeypatch):  # fmt: skip
    (in_tmp / name).write_bytes(OLD)
    breaker(monkeypatch, exc)
    option = "--out" if command == "heatmap" else "--save-npz"
    result = invoke([command, "the cat sat", *SMALL, option, name])
    assert result.exit_code == code, result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("qkv: error:") and fragment in lines[0]
    assert (in_tmp / name).read_bytes() == OLD
    assert sorted(p.name for p in in_tmp.iterdir()) == [name]


@pytest.mark.parametrize("command,name", [("heatmap", "new.png"), ("run", "new.npz")])
def test_failed_first_write_leaves_nothing(command, name, in_tmp, monkeypatch):
    (break_savefig if command == "heatmap" else break_savez)(monkeypatch, OSError(28, "No space left on device"))
    result = invoke([command, "the cat sat", *SMALL, "--out" if command == "heatmap" else "--save-npz", name])
    assert result.exit_code == 2
    assert list(in_tmp.iterdir()) == []


@pytest.mark.parametrize("command,name", [("heatmap", "w.png"), ("run", "w.npz")])
def test_successful_write_replaces_the_old_file(command, name, in_tmp):
    (in_tmp / name).write_bytes(OLD)
    result = invoke([command, "the cat sat", *SMALL, "--out" if command == "heatmap" else "--save-npz", name])
    assert result.exit_code == 0, result.output
    data = (in_tmp / name).read_bytes()
    assert data != OLD and len(data) > 100
    assert sorted(p.name for p in in_tmp.iterdir()) == [name]
    mode = stat.S_IMODE((in_tmp / name).stat().st_mode)
    umask = os.umask(0)
    os.umask(umask)
    assert mode == 0o666 & ~umask  # not the 0600 of a temporary file
    if name.endswith(".npz"):
        with np.load(in_tmp / name, allow_pickle=False) as npz:
            assert npz["weights"].shape == (2, 3, 3)


def test_interrupt_mid_write(tmp_path):
    """Ctrl-C (a BaseException) in the middle of writing: old file intact, temporary file removed."""
    target = tmp_path / "out.bin"
    target.write_bytes(OLD)
    with pytest.raises(KeyboardInterrupt):
        with atomic_write(target) as handle:
            handle.write(b"half")
            raise KeyboardInterrupt
    assert target.read_bytes() == OLD
    assert [p.name for p in tmp_path.iterdir()] == ["out.bin"]


def test_rename_failure_is_one_error_and_cleans_up(tmp_path, monkeypatch):
    target = tmp_path / "out.bin"
    target.write_bytes(OLD)
    monkeypatch.setattr(os, "replace", lambda *a: (_ for _ in ()).throw(OSError(18, "Invalid cross-device link")))
    with pytest.raises(QkvError, match="cannot write .*out.bin.*Invalid cross-device link"):
        with atomic_write(target) as handle:
            handle.write(b"complete but never renamed")
    assert target.read_bytes() == OLD
    assert [p.name for p in tmp_path.iterdir()] == ["out.bin"]


def test_temporary_file_cannot_be_created(tmp_path, monkeypatch):
    import tempfile

    monkeypatch.setattr(
        tempfile, "mkstemp", lambda **k: (_ for _ in ()).throw(PermissionError(13, "Permission denied"))
    )
    with pytest.raises(QkvError, match="cannot write .*Permission denied"):
        with atomic_write(tmp_path / "x.bin"):
            pytest.fail("the block must not run")
    assert list(tmp_path.iterdir()) == []


def test_temporary_file_sits_beside_the_target(tmp_path):
    """Beside it, not in /tmp: os.replace is atomic only within one filesystem."""
    (tmp_path / "sub").mkdir()
    with atomic_write(tmp_path / "sub" / "x.bin") as handle:
        (temporary,) = (tmp_path / "sub").iterdir()
        assert temporary.name.startswith(".x.bin.") and temporary.name.endswith(".tmp")
        handle.write(b"ok")
    assert (tmp_path / "sub" / "x.bin").read_bytes() == b"ok"
