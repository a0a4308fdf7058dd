"""At 80 columns: `qkv heads --model` keeps whole role names (the legend's short ones when the long ones do not
fit), and `qkv models` keeps each name whole and the end of each path, one line per checkpoint."""

from __future__ import annotations

import pytest
from clitools import invoke
from tiny import make_checkpoint


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    root = tmp_path_factory.mktemp("hub")
    repo = root / ("models--org--" + "a-rather-long-model-name")
    make_checkpoint(repo / "snapshots" / ("f" * 40), "gpt2")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("f" * 40)
    return root


def lines(result):
    assert result.exit_code == 0, result.output
    return result.stdout.splitlines()


def test_heads_roles_are_never_cut_at_80_columns(hub):
    folder = next(hub.glob("models--*/snapshots/*"))
    out = lines(invoke(["heads", "the cat sat on the mat because it was warm", "--model", str(folder)],
                       env={"COLUMNS": "80"}))  # fmt: skip
    assert max(len(line) for line in out) <= 80
    table = [line for line in out if line[:5].strip().isdigit()]
    assert table and not any(line.rstrip().endswith("…") for line in table)


def test_models_keeps_names_whole_and_the_end_of_paths(tmp_path):
    repo = tmp_path / "models--org--tiny"
    make_checkpoint(repo / "snapshots" / ("f" * 40), "gpt2")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("f" * 40)
    out = lines(invoke(["models"], env={"COLUMNS": "80", "HF_HUB_CACHE": str(tmp_path)}))
    assert max(len(line) for line in out) <= 80
    row = next(line for line in out if "org/tiny" in line)  # one line
    assert row.rstrip().endswith("f" * 8) and "…" in row  # the path's end (its snapshot folder), its start cut


def test_models_leaves_the_path_out_rather_than_squeeze_the_rest(hub):
    out = lines(invoke(["models"], env={"COLUMNS": "80", "HF_HUB_CACHE": str(hub)}))
    assert max(len(line) for line in out) <= 80
    row = next(line for line in out if "org/a-rather-long-model-name" in line)  # the name whole
    assert "…" not in row and "21." in row or "KB" in row
    assert any("paths left out" in line for line in out)
