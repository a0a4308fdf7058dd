"""Bad output paths are refused before any work, in one line, and nothing is written."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from clitools import SMALL, assert_one_line_error, files_in, invoke

# ---- outputs --------------------------------------------------------------------------------------------

OUTPUTS = [
    (["heatmap", "hi", "--out", "weights.gif"], ["'weights.gif'", ".png, .svg, .pdf"]),
    (["heatmap", "hi", "--out", "weights"], ["'weights'", ".png, .svg, .pdf"]),
    (["heatmap", "hi", "--out", "missing/weights.png"], ["'missing/weights.png'", "folder 'missing' does not exist"]),
    (["heatmap", "hi", "--out", "adir.png"], ["'adir.png'", "is a directory", "give a file name"]),
    (["run", "hi", "--save-npz", "adir.png"], ["'adir.png'", "is a directory", "give a file name"]),
    (["run", "hi", "--save-npz", "missing/x.npz"], ["'missing/x.npz'", "folder 'missing' does not exist"]),
    (["run", "hi", "--save-npz", "afile.txt/x.npz"], ["'afile.txt/x.npz'", "folder 'afile.txt' does not exist"]),
    (["heatmap", "hi", "--out", ""], ["cannot write ''", "not a file name"]),
    (["run", "hi", "--save-npz", "w\x00.npz"], ["'w\\x00.npz'", "not a file name"]),
    (["heatmap", "hi", "--out", "w\udc00.png"], ["'w\\udc00.png'", "not a file name"]),
]


@pytest.mark.parametrize("args,fragments", OUTPUTS, ids=[" ".join(a) for a, _ in OUTPUTS])
def test_outputs(args, fragments, in_tmp):
    (in_tmp / "adir.png").mkdir()
    (in_tmp / "afile.txt").write_text("keep me")
    before = files_in(in_tmp)
    assert_one_line_error(invoke([*args, *SMALL]), *fragments)
    assert files_in(in_tmp) == before
    assert (in_tmp / "afile.txt").read_text() == "keep me"


@pytest.mark.parametrize("args", [["heatmap", "hi", "--out", "out/w.png"], ["run", "hi", "--save-npz", "out/w.npz"]])
def test_unwritable_folder(args, in_tmp, monkeypatch):
    out = in_tmp / "out"
    out.mkdir()
    if os.geteuid() == 0:  # root writes through chmod 555: simulate a read-only folder
        import qkv_cli.views.export.writing

        real = qkv_cli.views.export.writing.os.access
        monkeypatch.setattr(
            qkv_cli.views.export.writing.os,
            "access",
            lambda p, mode: False if Path(p).resolve() == out else real(p, mode),
        )
    else:
        out.chmod(0o555)
    try:
        assert_one_line_error(invoke([*args, *SMALL]), f"'{args[-1]}'", "folder 'out' is not writable")
    finally:
        out.chmod(0o755)
    assert list(out.iterdir()) == []


def test_errors_are_checked_before_any_work(in_tmp, monkeypatch):
    """A bad output path is refused before the pipeline runs (no minutes of work lost to a typo)."""
    import qkv_cli.pipeline.seeded

    monkeypatch.setattr(qkv_cli.pipeline.seeded, "run", lambda *a, **k: pytest.fail("the pipeline ran"))
    assert_one_line_error(invoke(["heatmap", "hi", "--out", "x.jpg"]), "'x.jpg'")
    assert_one_line_error(invoke(["run", "hi", "--save-npz", "nowhere/x.npz"]), "'nowhere'")
