"""Head roles (`qkv heads`): statistics, thresholds, labels, aggregation over lines, the layer x head hook."""

import csv
import io
import json

import numpy as np
import pytest
from typer.testing import CliRunner

from qkv_cli.cli import app
from qkv_cli.core.roles import THRESHOLDS, head_stats, layer_head_stats, role
from qkv_cli.errors import QkvError

runner = CliRunner()


def invoke(*args):
    return runner.invoke(app, list(args), env={"COLUMNS": "100"})


def pattern(kind: str, m: int = 6):  # -> [m, m] weights of one idealised head
    w = np.zeros((m, m))
    for i in range(m):
        if kind == "self":
            w[i, i] = 1
        elif kind == "previous":
            w[i, max(i - 1, 0)] = 1
        elif kind == "first":
            w[i, 0] = 1
        elif kind == "local":  # spread evenly over i-2..i+2, never more than a half on one key
            keys = [t for t in range(i - 2, i + 3) if 0 <= t < m]
            w[i, keys] = 1 / len(keys)
        elif kind == "broad":
            w[i] = 1 / m
        elif kind == "far":  # everything on one key half the text away
            w[i, (i + m // 2) % m] = 1
    return w


@pytest.mark.parametrize(
    "kind,expected",
    [
        ("self", "self"),
        ("previous", "previous-token"),
        ("first", "first-token"),
        ("local", "local"),
        ("broad", "broad"),
        ("far", "mixed"),
    ],
)
def test_idealised_heads_get_their_role(kind, expected):
    stats = head_stats([pattern(kind)[None]])[0]
    assert stats["role"] == expected, stats


def test_statistics_of_known_patterns():
    s = head_stats([np.stack([pattern("previous"), pattern("broad")])])
    prev, broad = s
    assert prev["previous"] == 1 and prev["self"] == pytest.approx(1 / 6) and prev["entropy"] == 0
    assert prev["mean_distance"] == pytest.approx(5 / 6) and prev["softmax_grad"] == 0  # saturated
    assert broad["norm_entropy"] == pytest.approx(1) and broad["entropy"] == pytest.approx(np.log(6))
    assert broad["max_weight"] == pytest.approx(1 / 6) and broad["softmax_grad"] == pytest.approx(5 / 6)


def test_thresholds_are_the_documented_ones_and_ties_go_to_the_largest_share():
    base = dict.fromkeys(("self", "previous", "first", "local", "norm_entropy"), 0.0)
    assert role(base | {"self": THRESHOLDS["self"]}) == "self"
    assert role(base | {"self": 0.49}) == "mixed"
    assert role(base | {"self": 0.5, "first": 0.6}) == "first-token"
    assert role(base | {"local": 0.8}) == "local" and role(base | {"local": 0.79, "norm_entropy": 0.8}) == "broad"


def test_aggregation_weights_every_query_row_equally():
    a = pattern("self", 2)[None]  # 2 rows with self share 1
    b = pattern("first", 6)[None]  # 6 rows, self share only on row 0
    s = head_stats([a, b])[0]
    assert s["rows"] == 8
    assert s["self"] == pytest.approx((2 + 1) / 8)


def test_masked_rows_are_skipped_and_allowed_keys_define_norm_entropy():
    w = np.zeros((1, 3, 3))
    w[0, 0, 0] = 1
    w[0, 1, :2] = 0.5  # row 2: every key masked, weights all zero
    allowed = np.array([[1, 0, 0], [1, 1, 0], [0, 0, 0]], bool)
    s = head_stats([w], [allowed])[0]
    assert s["rows"] == 2 and s["norm_entropy"] == pytest.approx(0.5)  # row 0: one key (0); row 1: log2/log2


def test_layer_head_hook_for_checkpoints():
    rng = np.random.default_rng(0)
    ws = [rng.dirichlet(np.ones(m), size=(3, 2, m)) for m in (4, 7)]  # (L=3, tau=2, m, m) per sentence
    grid = layer_head_stats(ws)
    assert len(grid) == 3 and all(len(row) == 2 for row in grid)
    assert grid[2][1]["layer"] == 2 and grid[2][1]["head"] == 1 and grid[2][1]["rows"] == 11
    with pytest.raises(QkvError, match="same L and tau"):
        layer_head_stats([np.ones((2, 2, 3, 3)), np.ones((1, 2, 3, 3))])
    with pytest.raises(QkvError, match="no sentences"):
        layer_head_stats([])


def test_layer_head_table_rendering(capsys):
    from qkv_cli.views.console.heads import emit_heads

    ws = [np.stack([np.stack([pattern("previous"), pattern("self")]), np.stack([pattern("first"), pattern("broad")])])]
    emit_heads(layer_head_stats(ws), "table", "settings", 1)
    out = capsys.readouterr().out
    assert "Roles: layer x head" in out
    lines = [line.split() for line in out.splitlines()]
    assert ["0", "prev", "self"] in lines and ["1", "first", "broad"] in lines


def test_identity_projection_makes_self_heads():
    r = invoke(
        "heads",
        "The cat sat on the mat because it was warm.",
        "--d",
        "64",
        "--tau",
        "2",
        "--projection",
        "identity",
        "--format",
        "json",
    )
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert [h["role"] for h in doc["heads"]] == ["self", "self"]
    assert doc["thresholds"] == THRESHOLDS and doc["sentences"] == 1


def test_file_aggregates_over_lines_and_csv(tmp_path):
    f = tmp_path / "s.txt"
    f.write_text("the cat sat\n\na dog ran far away\n", encoding="utf-8")
    r = invoke("heads", "--file", str(f), "--d", "16", "--tau", "4", "--causal", "--format", "csv")
    assert r.exit_code == 0, r.output
    rows = list(csv.DictReader(io.StringIO(r.stdout)))
    assert len(rows) == 4 and rows[0]["rows"] == "8" and rows[3]["head"] == "3"
    assert set(rows[0]) >= {"entropy", "self", "previous", "first", "mean_distance", "role"}
    r = invoke("heads", "--file", str(f), "--d", "16", "--tau", "4")
    assert "2 sentences, 8 query rows per head" in r.output and "role:" in r.output


def test_heads_table_and_errors():
    r = invoke("heads", "--d", "16", "--tau", "2")
    assert r.exit_code == 0 and "1 sentence" in r.output
    r = invoke("heads", "a b", "--context", "c d")  # heads has no --context: roles need self-attention
    assert r.exit_code == 2 and "No such option: --context" in r.output


def test_heads_table_at_80_columns_keeps_every_number():
    """Regression: at 80 columns rich cut every statistic to '0.…'; the table now tightens its gaps instead."""
    r = runner.invoke(app, ["heads", "--d", "16", "--tau", "2"], env={"COLUMNS": "80"})
    assert r.exit_code == 0, r.output
    table = r.output.split("query rows per head")[1].split("role:")[0]
    assert "…" not in table and "entropy" in table and "norm H" in table and "mixed" in table
    assert max(len(line) for line in r.output.splitlines()) <= 80
