"""Numerics through the whole pipeline (the kernels' own properties live in test_kernels.py).

float32 agrees with float64 to float32 precision; huge and tiny --scale never put NaN or inf in a table, JSON
or CSV; a query whose every key is masked gets zero weights and is flagged in the output.
"""

from __future__ import annotations

import json
import math
import warnings

import numpy as np
import pytest
from typer.testing import CliRunner

from qkv_cli.cli import app
from qkv_cli.core.kernels import KERNELS
from qkv_cli.core.numerics import exp_normalize_
from qkv_cli.core.settings import Settings
from qkv_cli.pipeline.seeded import run

TEXT = "The animal did not cross the street because it was too tired, said the animal."
ARRAYS = ("H", "Q", "K", "V", "scores", "weights", "heads", "output")
ALL_SHOW = "q,k,v,scores,mask,weights,output,heads,h"


def invoke(args):
    return CliRunner().invoke(app, [str(a) for a in args])


def max_error(a32, a64):
    """Largest |float32 - float64| relative to the array's scale (at least 1)."""
    a64 = np.asarray(a64, dtype=np.float64)
    return float(np.abs(np.asarray(a32, dtype=np.float64) - a64).max() / max(1.0, float(np.abs(a64).max())))


CONFIGS = [
    {},
    {"kernel": "loop"},
    {"causal": True},
    {"window": 3},
    {"scale": "none"},
    {"scale": "sqrt"},
    {"scale": "-1.5"},
    {"scale": "0"},
    {"positions": "none"},
    {"projection": "identity"},
    {"d": 96, "tau": 12, "seed": 7},
    {"kv_heads": 2},
    {"tokenizer": "bpe"},
]


@pytest.mark.parametrize(
    "options", CONFIGS, ids=[",".join(f"{k}={v}" for k, v in c.items()) or "default" for c in CONFIGS]
)
def test_float32_agrees_with_float64(options):
    base = {"d": 64, "tau": 4} | options
    r64 = run(TEXT, Settings(**base, dtype="float64"))
    r32 = run(TEXT, Settings(**base, dtype="float32"))
    for name in ARRAYS:
        a32, a64 = getattr(r32, name), getattr(r64, name)
        assert a32.dtype == np.float32, name
        assert a64.dtype == np.float64, name
        assert np.isfinite(a32).all(), name
        # float32 carries ~7 digits; a few matrix products and a softmax lose at most a couple of them
        assert max_error(a32, a64) < 2e-5, (name, max_error(a32, a64))
    np.testing.assert_array_equal(r32.mask, r64.mask.astype(np.float32))


def test_float32_agrees_with_float64_through_the_cli():
    docs = {}
    for dtype in ("float64", "float32"):
        result = invoke(["run", TEXT, "--d", "64", "--tau", "4", "--causal", "--dtype", dtype, "--format", "json",
                         "--show", "weights,output,scores"])  # fmt: skip
        assert result.exit_code == 0, result.output
        docs[dtype] = json.loads(result.stdout)["matrices"]
    for name in ("weights", "output", "scores"):
        assert max_error(docs["float32"][name], docs["float64"][name]) < 2e-5, name


EXTREME_SCALES = ["1e300", "-1e300", "1e308", "-1e308", "3e38", "1e30", "1e10", "1e-10", "1e-300", "5e-324", "-0"]


def finite_numbers(obj):
    """Every number in a parsed JSON document (null = None is skipped), flattened."""
    if isinstance(obj, list):
        for x in obj:
            yield from finite_numbers(x)
    elif isinstance(obj, int | float) and not isinstance(obj, bool):
        yield obj


def nulls(obj) -> int:
    if isinstance(obj, list):
        return sum(nulls(x) for x in obj)
    return obj is None


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("scale", EXTREME_SCALES)
def test_extreme_scales_give_no_nan_or_inf_in_json(scale, dtype):
    args = ["run", TEXT, "--d", "16", "--tau", "2", "--dtype", dtype, "--scale", scale]
    result = invoke([*args, "--format", "json", "--show", ALL_SHOW])
    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.stderr
    doc = json.loads(result.stdout)  # json.loads accepts NaN/Infinity; check there are none
    assert "NaN" not in result.stdout and "Infinity" not in result.stdout
    for name, matrix in doc["matrices"].items():
        assert nulls(matrix) == 0, name  # no mask: nothing is -inf, so nothing may be null
        assert all(math.isfinite(x) for x in finite_numbers(matrix)), name
    weights = np.array(doc["matrices"]["weights"])
    np.testing.assert_allclose(weights.sum(axis=-1), 1.0, atol=1e-5)
    assert (weights >= 0).all() and (weights <= 1).all()


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("scale", ["1e300", "-1e300", "1e-300"])
def test_extreme_scales_give_no_nan_or_inf_in_csv_and_tables(scale, dtype):
    args = ["run", TEXT, "--d", "16", "--tau", "2", "--dtype", dtype, "--scale", scale, "--causal"]
    csv = invoke([*args, "--format", "csv", "--show", ALL_SHOW])
    assert csv.exit_code == 0, csv.output
    for row in csv.stdout.splitlines()[1:]:
        value = row.rsplit(",", 1)[1]
        if row.startswith("mask,"):
            assert value in ("0.0", "-0.0", "-inf"), row
        else:
            assert math.isfinite(float(value)), row
    table = invoke([*args, "--show", ALL_SHOW, "--precision", "3"])
    assert table.exit_code == 0, table.output
    body = table.stdout.lower()
    assert "nan" not in body
    assert "inf" not in body.replace("-inf = may not", "").replace("-inf", "")  # -inf only in the Mask table


def test_huge_values_are_readable_in_tables():
    """A huge score is printed in exponent form, not as 300 digits cut to '10668371022…'."""
    result = invoke(["run", "the cat sat", "--d", "8", "--tau", "2", "--scale", "1e300", "--show", "scores"])
    assert result.exit_code == 0
    assert "e+30" in result.stdout
    assert "…" not in "".join(line.split("│")[-1] for line in result.stdout.splitlines() if "the " in line[:6])


def test_masked_cells_are_null_in_json_and_their_weights_exactly_zero():
    result = invoke(["run", TEXT, "--d", "16", "--tau", "2", "--window", "2", "--format", "json",
                     "--show", "mask,weights"])  # fmt: skip
    assert result.exit_code == 0
    doc = json.loads(result.stdout)
    mask = doc["matrices"]["mask"]
    weights = np.array(doc["matrices"]["weights"])
    masked = np.array([[v is None for v in row] for row in mask])
    assert masked.any() and not masked.all(axis=1).any()
    assert (weights[:, masked] == 0.0).all()
    assert all(v == 0.0 for row in mask for v in row if v is not None)


@pytest.mark.parametrize("kernel", ["vectorized", "loop"])
def test_no_floating_point_warnings_for_extreme_scales(kernel):
    """A RuntimeWarning would reach the user as two raw lines on stderr."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for dtype in ("float64", "float32"):
            for scale in ("1e300", "-1e300", "1e308", "3e38", "1e-300"):
                for causal in (False, True):
                    settings = Settings(d=16, tau=2, dtype=dtype, scale=scale, kernel=kernel, causal=causal)
                    assert np.isfinite(run(TEXT, settings).weights).all()


@pytest.mark.parametrize("command", ["run", "explain", "heads", "heatmap"])
def test_extreme_scales_print_nothing_on_stderr(command, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for dtype in ("float32", "float64"):
        for scale in ("1e300", "-1e300", "1e-300"):
            panels = ["--head", "0"] if command == "heatmap" else []  # one panel: the numbers are the same
            result = invoke([command, TEXT, "--d", "16", "--tau", "2", "--dtype", dtype, "--scale", scale, *panels])
            assert result.exit_code == 0, result.output
            assert result.stderr == "", (dtype, scale, result.stderr)


# ---- fully masked rows ----------------------------------------------------------------------------------


@pytest.fixture
def empty_row_grid():
    m = 4  # "the cat sat down"
    allowed = np.ones((m, m), dtype=bool)
    allowed[1] = False  # query 1 may attend to nothing
    allowed[3, 3] = False
    return allowed


@pytest.mark.parametrize("kernel", list(KERNELS))
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_fully_masked_row_gives_zeros_not_nan(empty_row_grid, kernel, dtype):
    result = run("the cat sat down", Settings(d=8, tau=2, kernel=kernel, dtype=dtype), allowed=empty_row_grid)
    for name in ARRAYS:
        assert np.isfinite(getattr(result, name)).all(), name
    assert (result.weights[:, 1, :] == 0).all()
    assert (result.heads[:, 1, :] == 0).all()
    assert (result.output[1] == 0).all()
    np.testing.assert_allclose(result.weights[:, [0, 2, 3], :].sum(axis=-1), 1.0, rtol=1e-6)
    assert result.empty_rows.tolist() == [False, True, False, False]


def test_fully_masked_row_is_flagged_in_every_view(empty_row_grid, tmp_path):
    path = tmp_path / "mask.txt"
    path.write_text("\n".join(" ".join(str(int(v)) for v in row) for row in empty_row_grid))
    base = ["run", "the cat sat down", "--d", "8", "--tau", "2", "--mask-file", path]
    table = invoke(base)
    assert table.exit_code == 0, table.output
    assert "queries with every key masked (weights all 0): 1" in table.stdout
    doc = json.loads(invoke([*base, "--format", "json", "--show", "weights,output"]).stdout)
    assert doc["fully_masked_queries"] == [1]
    assert all(v == 0 for head in doc["matrices"]["weights"] for v in head[1])
    assert all(v == 0 for v in doc["matrices"]["output"][1])
    csv = invoke([*base, "--format", "csv", "--show", "weights"]).stdout
    assert "nan" not in csv.lower()


@pytest.mark.parametrize("shape, k", [((49152,), 5), ((3, 40), 5), ((2, 3, 17), 4), ((6,), 9), ((1, 7), 7), ((5,), 0)])
@pytest.mark.parametrize("values", ["normal", "ties", "non-finite"])
def test_top_indices_is_a_stable_argsort_cut_to_k(shape, k, values):
    from qkv_cli.core.stats import top_indices

    rng = np.random.default_rng(sum(shape) + k)
    x = rng.integers(0, 4, shape).astype(float) if values == "ties" else rng.standard_normal(shape)  # 4 values
    if values == "non-finite":  # NaN sorts after -inf in an argsort of -x
        flat = x.reshape(-1)
        picks = rng.choice(flat.size, size=min(flat.size, 6), replace=False)
        flat[picks] = [np.nan, -np.inf, np.inf, np.nan, -np.inf, np.inf][: picks.size]
    want = np.argsort(-x, axis=-1, kind="stable")[..., :k]
    np.testing.assert_array_equal(top_indices(x, k), want)


def test_exp_normalize_writes_the_softmax_into_out_and_leaves_exp_in_x():
    x = np.array([[0.0, math.log(3.0)], [math.log(2.0), math.log(2.0)]], dtype=np.float32)  # hand-worked
    out = np.full((2, 2), np.nan, dtype=np.float32)
    assert exp_normalize_(x, np.ones(2, dtype=np.float32), out=out)
    np.testing.assert_allclose(out, [[0.25, 0.75], [0.5, 0.5]], rtol=1e-6)
    np.testing.assert_allclose(x, [[1.0, 3.0], [2.0, 2.0]], rtol=1e-6)  # exp(x), not normalized


def test_exp_normalize_refuses_a_fully_masked_row_and_leaves_out_alone():
    x = np.array([[0.0, 1.0], [-np.inf, -np.inf]])
    out = np.full((2, 2), 7.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        assert not exp_normalize_(x, np.ones(2), out=out)  # the caller then runs the exact softmax
    assert (out == 7.0).all()
