"""The CLI through CliRunner, once through the installed `qkv` entry point, and its start-up imports."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from qkv_cli.cli import app
from qkv_cli.views.export.results import SCHEMA

runner = CliRunner()
TEXT = "The animal didn't cross the street because it was too tired."


def invoke(*args, input=None):
    return runner.invoke(app, list(args), input=input, env={"COLUMNS": "120"})


def test_run_table_has_labels_masked_cells_and_summary():
    r = invoke("run", TEXT, "--heads", "2", "--d", "16", "--causal")
    assert r.exit_code == 0, r.output
    assert "animal" in r.output and "tired" in r.output
    assert "head 0" in r.output and "head 1" in r.output
    assert "·" in r.output  # masked cells are drawn distinctly
    assert "entropy" in r.output and "mean distance" in r.output


def test_run_head_selection_and_show():
    r = invoke("run", "a b c", "--heads", "4", "--d", "8", "--head", "2", "--show", "q,mask,output")
    assert r.exit_code == 0, r.output
    assert "Q^[2]" in r.output and "Q^[0]" not in r.output
    assert "Mask" in r.output and "output = concat(heads) W^o" in r.output


def test_run_json_shapes_and_values():
    r = invoke("run", "a b c d", "--heads", "2", "--d", "8", "--format", "json", "--show", "weights,mask,q", "--causal")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["tokens"] == ["a", "b", "c", "d"]
    assert np.array(doc["matrices"]["weights"]).shape == (2, 4, 4)
    assert np.array(doc["matrices"]["Q"]).shape == (2, 4, 4)
    assert doc["matrices"]["mask"][0] == [0.0, None, None, None]  # -inf is null in JSON
    assert doc["settings"]["causal"] is True


def test_run_csv_long_form():
    r = invoke("run", "x y", "--heads", "2", "--d", "4", "--format", "csv", "--head", "1")
    lines = r.stdout.strip().splitlines()
    assert lines[0] == "matrix,head,query,key,query_token,key_token,value"
    assert len(lines) == 1 + 4 and all(line.startswith("weights,1,") for line in lines[1:])


def test_run_reads_stdin_and_file(tmp_path):
    assert "kitten" in invoke("run", "-", "--d", "8", "--heads", "2", input="a kitten").output
    f = tmp_path / "t.txt"
    f.write_text("a puppy", encoding="utf-8")
    assert "puppy" in invoke("run", "--file", str(f), "--d", "8", "--heads", "2").output


def test_save_npz_schema(tmp_path):
    path = tmp_path / "run.npz"
    r = invoke("run", TEXT, "--heads", "4", "--d", "32", "--save-npz", str(path), "--causal")
    assert r.exit_code == 0, r.output
    z = np.load(path, allow_pickle=False)
    m = 12  # "didn't" is one word token
    expected = {
        "tokens": (m,),
        "H": (m, 32),
        "Wq": (4, 32, 8),
        "Wk": (4, 32, 8),
        "Wv": (4, 32, 8),
        "Q": (4, m, 8),
        "K": (4, m, 8),
        "V": (4, m, 8),
        "scores": (4, m, m),
        "mask": (m, m),
        "weights": (4, m, m),
        "heads": (4, m, 8),
        "Wo": (32, 32),
        "output": (m, 32),
    }
    assert {k: z[k].shape for k in expected} == expected
    assert set(SCHEMA) <= set(z.files) and {"d", "tau", "scale", "seed", "kernel"} <= set(z.files)
    assert int(z["d"]) == 32 and int(z["tau"]) == 4 and str(z["kernel"]) == "vectorized"
    assert float(z["scale"]) == pytest.approx(1 / np.sqrt(8))
    # the saved matrices satisfy the formulas
    np.testing.assert_allclose(z["Q"], z["H"] @ z["Wq"], atol=1e-12)
    np.testing.assert_allclose(z["heads"], z["weights"] @ z["V"], atol=1e-12)
    np.testing.assert_allclose(z["output"], np.concatenate(list(z["heads"]), 1) @ z["Wo"], atol=1e-12)
    assert list(tmp_path.iterdir()) == [path]  # no temp files left behind


def test_shapes_json_names():
    r = invoke("shapes", "--d", "512", "--tau", "8", "--m", "30", "--format", "json")
    doc = json.loads(r.stdout)
    assert (doc["d"], doc["tau"], doc["m"], doc["d_k"]) == (512, 8, 30, 64)
    assert doc["matrices"] == {
        "H": [30, 512],
        "W_q": [512, 64],
        "W_k": [512, 64],
        "W_v": [512, 64],
        "Q": [30, 64],
        "K": [30, 64],
        "V": [30, 64],
        "scores": [30, 30],
        "mask": [30, 30],
        "weights": [30, 30],
        "head_output": [30, 64],
        "concat": [30, 512],
        "W_o": [512, 512],
        "output": [30, 512],
    }
    assert doc["total_params"] == 4 * 512 * 512


def test_shapes_counts_text_tokens():
    doc = json.loads(invoke("shapes", "one two three", "--d", "8", "--tau", "2", "--format", "json").stdout)
    assert doc["m"] == 3


def test_shapes_table_uses_the_notation():
    out = invoke("shapes", "--d", "512", "--tau", "8").output
    for symbol in ("W_j^q", "Q^[j] = H W_j^q", "W^o", "512 x 64", "x8"):
        assert symbol in out


@pytest.mark.parametrize("command", ["run", "heatmap", "shapes"])
def test_help_has_an_example(command):
    r = invoke(command, "--help")
    assert r.exit_code == 0 and "Example: qkv " + command in r.output


def test_version():
    from qkv_cli import __version__

    assert invoke("--version").output.strip() == f"qkv {__version__}"


def test_errors_are_one_line_exit_2():
    r = invoke("run", "abc", "--d", "500", "--heads", "8")
    assert r.exit_code == 2
    assert r.stderr.strip() == "qkv: error: d (500) must be divisible by tau (8): each head has width d/tau"
    r = invoke("run", "abc", "--kernel", "fast")
    assert r.exit_code == 2 and r.stderr.count("\n") == 1 and "vectorized, loop" in r.stderr


def test_heatmap_writes_a_real_image(tmp_path):
    import matplotlib.image

    out = tmp_path / "att.png"
    r = invoke("heatmap", "--heads", "4", "--d", "32", "--causal", "--out", str(out))
    assert r.exit_code == 0, r.output
    assert r.stdout.strip() == str(out)
    pixels = matplotlib.image.imread(out)
    assert pixels.shape[0] > 200 and pixels.shape[1] > 400
    assert pixels[..., :3].std() > 0.1  # not blank
    assert len(np.unique(pixels[..., :3].reshape(-1, 3), axis=0)) > 50  # a colour map, not a flat fill


@pytest.mark.parametrize("suffix,magic", [(".svg", b"<?xml"), (".pdf", b"%PDF")])
def test_heatmap_vector_formats(tmp_path, suffix, magic):
    out = tmp_path / f"att{suffix}"
    assert invoke("heatmap", "a b c", "--heads", "2", "--d", "8", "--out", str(out)).exit_code == 0
    assert out.read_bytes().startswith(magic)


def test_installed_entry_point_runs():
    qkv = shutil.which("qkv") or str(Path(sys.executable).with_name("qkv"))
    done = subprocess.run(
        [qkv, "run", "hello there", "--d", "8", "--heads", "2"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert "hello" in done.stdout and "there" in done.stdout
    bad = subprocess.run([qkv, "run", "", "--d", "8"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and bad.stderr.startswith("qkv: error:") and "Traceback" not in bad.stderr


def test_cli_import_is_light():
    heavy = "('matplotlib', 'numpy', 'tokenizers', 'safetensors')"
    code = f"import sys, qkv_cli.cli; print(sorted(m for m in {heavy} if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "[]", done.stdout + done.stderr


def test_shapes_and_help_do_not_import_numpy():
    code = (
        "import sys\nfrom typer.testing import CliRunner\nfrom qkv_cli.cli import app\n"
        "CliRunner().invoke(app, ['shapes', '--d', '512', '--tau', '8'])\nCliRunner().invoke(app, ['--help'])\n"
        "print(sorted(m for m in ('matplotlib', 'numpy', 'tokenizers') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "[]", done.stdout + done.stderr


@pytest.mark.parametrize("width", [60, 80, 100, 120, 160])
@pytest.mark.parametrize("n,weights,precision", [(11, True, 2), (14, False, 2), (20, True, 4), (40, False, 0)])
def test_matrix_table_shows_every_column_it_counts(width, n, weights, precision):
    """Regression: the fit ignored the column gaps, so rich silently dropped the last column(s) at 80 columns
    (the '.' of an 11-token run) while the note said nothing was left out."""
    from rich.console import Console

    from qkv_cli.views.console.tables import matrix_table

    matrix = np.random.default_rng(0).random((n, n))
    table, note = matrix_table("t", matrix, ["because"] * n, [f"c{j:02d}" for j in range(n)], precision, width, weights)
    console = Console(width=width, record=True, file=open(os.devnull, "w"))  # noqa: SIM115
    console.print(table)
    text = console.export_text()
    counted = len(table.columns) - 1
    header = next(line for line in text.splitlines() if "c00" in line)
    assert len([w for w in header.split() if w.startswith("c")]) == counted
    assert (note is not None) == (counted < n)
    assert max(len(line) for line in text.splitlines()) <= width


def test_run_at_80_columns_names_every_column_or_says_what_is_left_out():
    """An 11-token sentence at 80 columns: every column, each label a whole word (it was 10 of 11, cut to 5)."""
    r = runner.invoke(app, ["run", "The cat sat on the mat because it was warm.", "--d", "16", "--tau", "2",
                            "--head", "0"], env={"COLUMNS": "80"})  # fmt: skip
    assert r.exit_code == 0, r.output
    assert "showing" not in r.output
    header = next(line for line in r.output.splitlines() if "because" in line and "warm" in line)
    assert header.split() == ["The", "cat", "sat", "on", "the", "mat", "because", "it", "was", "warm", "."]
    assert max(len(line) for line in r.output.splitlines()) <= 80


def test_run_without_text_uses_the_sample():
    from qkv_cli.text.samples import default_text

    r = invoke("run", "--d", "8", "--heads", "2", "--format", "json")
    assert r.exit_code == 0, r.output
    assert " ".join(json.loads(r.stdout)["tokens"][:3]) == " ".join(default_text().split()[:3])


def test_closed_pipe_stops_quietly():
    qkv = shutil.which("qkv") or str(Path(sys.executable).with_name("qkv"))
    proc = subprocess.Popen([qkv, "run", "--d", "64", "--heads", "64"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.readline()
    proc.stdout.close()  # like `| head -1`
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0 and err == b""
