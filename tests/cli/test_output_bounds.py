"""Outputs that stay bounded: --max-output refuses a JSON or CSV estimated too large before any weight is read;
a checkpoint's JSON and CSV are written layer by layer as the forward makes them, the same bytes as before, and
equal to the NPZ; a full disk or a file size limit gives one line and no half file."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from clitools import SMALL, assert_one_line_error, invoke
from tiny import TINY, make_checkpoint

TEXT = "the cat sat on the mat"
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def damaged(tmp_path_factory):
    """A tiny Llama whose layer 0 W^q holds NaN: any run that reads that layer's weights fails on them."""

    def edit(t):
        t["layers.0.self_attn.q_proj.weight"][0, :2] = np.nan

    return make_checkpoint(tmp_path_factory.mktemp("damaged") / "llama", "llama", tensor_edit=edit)


@pytest.fixture(scope="module")
def qwen(tmp_path_factory):
    return make_checkpoint(tmp_path_factory.mktemp("qwen") / "qwen2", "qwen2")


def test_the_damaged_layer_is_read_when_the_run_goes(damaged):
    """The control for the refusals below: a run that reaches layer 0 stops on its NaN weights."""
    assert_one_line_error(invoke(["run", TEXT, "--model", damaged, "--format", "json"]), "non-finite")
    assert_one_line_error(invoke(["run", TEXT, "--model", damaged, "--max-output", "1KB"]), "non-finite")  # a table


REFUSED = [  # (options, fragments of the one line, fragments it must not hold)
    (["--format", "json"], ["the JSON output would be about", "2 layers x 4 heads x 6 rows x 6 keys",
                            "more than --max-output 1.0 KB", "--layer, --head, --rows, or --save-npz FILE"], []),
    (["--format", "csv", "--show", "q,k"], ["the CSV output would be about", "--show q, k", "--rows"], []),
    (["--format", "json", "--layer", "1", "--head", "0"], ["1 layer x 1 head x 6 rows", "--rows or --save-npz"],
     ["--layer", "--head,"]),
    (["--format", "json", "--rows", "-2:"], ["x 2 rows x 6 keys", "--layer, --head, or --save-npz"], ["--rows"]),
]  # fmt: skip


@pytest.mark.parametrize("options,fragments,absent", REFUSED, ids=[" ".join(o) for o, _, _ in REFUSED])
def test_an_output_above_max_output_is_refused_before_any_weight_is_read(damaged, options, fragments, absent):
    result = invoke(["run", TEXT, "--model", damaged, *options, "--max-output", "1KB"])
    line = assert_one_line_error(result, *fragments)
    assert "non-finite" not in line and result.stdout == ""  # refused before layer 0's weights were read
    for word in absent:  # an option already given is not offered again
        assert word not in line.split("shrink it with")[1].split("(binary")[0], line


def test_random_weights_output_is_refused_too():
    line = assert_one_line_error(invoke(["run", TEXT, "--format", "json", "--max-output", "1KB", *SMALL]),
                                 "1 layer x 2 heads x 6 rows x 6 keys", "a shorter text", "--save-npz")  # fmt: skip
    assert "--layer" not in line and "--rows" not in line  # neither applies to random weights


def test_a_bad_max_output_is_one_line():
    assert_one_line_error(invoke(["run", TEXT, "--format", "json", "--max-output", "lots"]), "--max-output 'lots'")


def test_the_limit_names_a_size_and_lets_a_small_output_through(damaged, qwen):
    """The default (256 MB) and a raised limit let the tiny runs through; the estimate is within 2x the bytes."""
    result = invoke(["run", TEXT, "--model", qwen, "--format", "json", "--max-output", "1GB"])
    assert result.exit_code == 0, result.output
    from qkv_cli.core.output_size import Layout, Output, output_bytes

    s = Layout(R=6, n=6, d=TINY["d"], d_k=TINY["d"] // TINY["tau"], tau=TINY["tau"], G=2, layers=2, kept_layers=2,
               kept_heads=TINY["tau"])  # fmt: skip
    estimate = output_bytes(Output("json"), s)
    assert len(result.stdout) / 2 <= estimate <= 2 * len(result.stdout)


def test_json_is_written_as_each_layer_is_made_and_equals_the_npz(qwen, tmp_path):
    """The writer has the first layer on its page before the forward makes the second; the text is the one the
    whole-document writer gives (json.dumps of the finished run), and it holds the NPZ's numbers."""
    from qkv_cli.api.arguments import request
    from qkv_cli.api.commands import execute
    from qkv_cli.pipeline.compute import load_model
    from qkv_cli.views.export.writing import save_npz
    from qkv_cli.views.model import emit_run
    from qkv_cli.views.streaming import LayerWriter

    show, heads = ["q", "k", "v", "scores", "weights", "output"], [0, 1, 2, 3]
    req = request({"model": str(qwen), "layer": (0, 1)}, TEXT, narrow=True)
    model = load_model(req)
    page = io.StringIO()
    writer = LayerWriter("json", show, heads, out=page)
    seen = []
    streamed = execute(req, model, on_layer=lambda l, r: (writer(l, r), seen.append((l, len(page.getvalue()))))).result
    assert [l for l, _ in seen] == [0, 1] and 0 < seen[0][1] < seen[1][1]  # layer 0 written before layer 1 was made
    assert list(streamed.layers) == [0]  # the others were written, then dropped
    writer.finish(streamed)
    whole = execute(req, model).result  # the same run, every layer kept, written as one document
    out = io.StringIO()
    sys_stdout, sys.stdout = sys.stdout, out
    try:
        emit_run(whole, show, heads, 2, "json")
    finally:
        sys.stdout = sys_stdout
    assert page.getvalue() == out.getvalue()
    doc = json.loads(page.getvalue())
    from qkv_cli.views.export.results import model_arrays

    path = save_npz(model_arrays(streamed), tmp_path / "run.npz")
    with np.load(path, allow_pickle=False) as z:
        np.testing.assert_allclose(doc["attentions"], z["attentions"], atol=1e-12)
        for name in ("Q", "K", "V", "scores", "weights", "output"):
            got = np.array([[np.nan if v is None else v for v in row] for row in np.reshape(
                np.array(doc["layers"]["0"][name], dtype=object), (-1, z[name].shape[-1]))], dtype=float)  # fmt: skip
            want = np.where(np.isfinite(z[name]), z[name], np.nan).reshape(got.shape)
            np.testing.assert_allclose(got, want, atol=1e-12, err_msg=name)
    np.testing.assert_allclose(doc["layers"]["1"]["weights"], np.asarray(doc["attentions"])[1], atol=1e-12)


def test_csv_is_written_as_each_layer_is_made(qwen):
    from qkv_cli.api.arguments import request
    from qkv_cli.api.commands import execute
    from qkv_cli.pipeline.compute import load_model
    from qkv_cli.views.streaming import LayerWriter

    req = request({"model": str(qwen)}, TEXT, all_layers=True, narrow=True)
    page = io.StringIO()
    writer = LayerWriter("csv", ["weights"], [0, 1, 2, 3], out=page)
    sizes = []
    execute(req, load_model(req), on_layer=lambda l, r: (writer(l, r), sizes.append(page.getvalue().count("\n"))))
    cells = TINY["tau"] * 6 * 6
    assert sizes == [1 + cells, 1 + 2 * cells]  # the header and layer 0's rows, then layer 1's
    assert page.getvalue().splitlines()[1].startswith("0,weights,0,0,0,")


def _qkv(args, fsize=None, stdout=None):
    """qkv's main() in a subprocess (optionally under a file size limit, SIGXFSZ ignored so writes fail)."""
    code = ("import resource, signal, sys\n"
            "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
            + (f"resource.setrlimit(resource.RLIMIT_FSIZE, ({fsize}, {fsize}))\n" if fsize else "") +
            "from qkv_cli.__main__ import main\n"
            "sys.argv = ['qkv'] + sys.argv[1:]\n"
            "main()\n")  # fmt: skip
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-c", code, *map(str, args)], capture_output=stdout is None,
                          stdout=stdout, stderr=subprocess.PIPE if stdout is not None else None, text=True,
                          env=env, timeout=120)  # fmt: skip


def _one_line(proc, *fragments):
    lines = proc.stderr.splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith("qkv: error: "), proc.stderr
    assert "Traceback" not in proc.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def test_npz_over_a_file_size_limit_is_one_line_and_no_file(qwen, tmp_path):
    proc = _qkv(["run", TEXT, "--model", qwen, "--format", "csv", "--save-npz", tmp_path / "run.npz"], fsize=4096)
    _one_line(proc, "cannot write", "run.npz", "File too large")
    assert list(tmp_path.iterdir()) == []  # neither the archive nor its temporary file


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
@pytest.mark.parametrize("fmt", ["json", "csv"])
def test_a_streamed_output_to_a_full_disk_is_one_line(qwen, fmt):
    with open("/dev/full", "w") as full:
        proc = _qkv(["run", TEXT, "--model", qwen, "--format", fmt], stdout=full)
    _one_line(proc, "cannot write the output", "No space left on device")


@pytest.mark.parametrize("fmt", ["json", "csv"])
def test_an_attribution_above_max_output_is_refused_before_any_weight_is_read(damaged, fmt):
    args = ["attribute", TEXT, "--model", damaged, "--method", "rollout", "--format", fmt, "--max-output", "1KB"]
    line = assert_one_line_error(invoke(args), f"the {fmt.upper()} output would be about", "4 heads x 6 rows x 6 keys",
                                 "a shorter text", "--save-npz")  # fmt: skip
    assert "non-finite" not in line
    assert_one_line_error(invoke(args[:-2]), "non-finite")  # the default limit lets it run: it reads the layer


def test_a_comparison_above_max_output_is_refused_before_any_weight_is_read(damaged):
    args = ["compare", TEXT, "the dog sat on the mat", "--model", damaged, "--format", "json"]
    line = assert_one_line_error(invoke([*args, "--max-output", "1KB"]), "the JSON output would be about",
                                 "2 layers x 4 heads x 6 and 6 tokens", "shorter texts", "--save-npz")  # fmt: skip
    assert "non-finite" not in line
    assert_one_line_error(invoke(args), "non-finite")  # the default limit lets it run: it reads the layer


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        (["attribute", "-", "--method", "rollout", "--format", "csv"], ("4 heads x 6 rows x 6 keys",)),
        (["explain", "-", "--format", "json"], ("1 head x 6 rows x 6 keys",)),
        (["run", "--file", "-", "--format", "json"], ("6 rows x 6 keys",)),
        (["compare", "-", "the dog sat on the mat", "--format", "json"], ("6 and 6 tokens",)),
    ],
)
def test_a_text_on_stdin_is_counted_before_the_run_too(damaged, args, fragments):
    """stdin is read once, before the run: the output it would make is refused like a text given in full."""
    full = [*args, "--model", damaged]
    line = assert_one_line_error(invoke([*full, "--max-output", "1B"], input=TEXT), "would be about", *fragments)
    assert "non-finite" not in line
    assert_one_line_error(invoke(full, input=TEXT), "non-finite")  # the default limit lets it run, on stdin's text


def test_stdin_is_read_once_and_its_text_used_by_the_run(qwen):
    """The count reads stdin before the run; the run then gets the same text (not an empty stream)."""
    r = invoke(["run", "-", "--model", qwen, "--format", "json", "--max-output", "10MB"], input=TEXT)
    assert r.exit_code == 0, r.output
    assert (
        json.loads(r.stdout)["tokens"]
        == json.loads(invoke(["run", TEXT, "--model", qwen, "--format", "json"]).stdout)["tokens"]
    )
    assert_one_line_error(invoke(["compare", "-", "-", "--model", qwen], input=TEXT), "stdin can be read once")


def test_a_page_over_a_file_size_limit_is_one_line_and_no_file(tmp_path):
    proc = _qkv(["view", TEXT, "--d", "8", "--heads", "2", "--out", tmp_path / "a.html"], fsize=4096)
    _one_line(proc, "cannot write", "a.html", "File too large")
    assert list(tmp_path.iterdir()) == []  # neither the page nor its temporary file


WHOLE = [["run", TEXT, "--d", "8", "--heads", "2"], ["run", "the cat\nsat on the mat", "--batch", "--d", "8"],
         ["mask", TEXT, "--causal"]]  # fmt: skip


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
@pytest.mark.parametrize("args", WHOLE, ids=[a[0] + (" --batch" if "--batch" in a else "") for a in WHOLE])
def test_a_whole_document_to_a_full_disk_is_one_line(args):
    """The runs written after they finish (random weights, a batch, qkv mask) fail as the streamed ones do."""
    with open("/dev/full", "w") as full:
        proc = _qkv([*args, "--format", "json"], stdout=full)
    _one_line(proc, "cannot write the output", "No space left on device")
