"""--batch: sentences padded to the longest, pad keys masked; each equals the sentence run alone."""

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from qkv_cli.cli import app
from qkv_cli.core.settings import Settings
from qkv_cli.errors import QkvError
from qkv_cli.pipeline.batch import PAD, run_batch
from qkv_cli.pipeline.seeded import run
from qkv_cli.text.inputs import sentences

runner = CliRunner()
LINES = ["The kettle whistled while the rain tapped on the window.", "Every student wrote a poem.", "Hi !"]
FIELDS = ("H", "Q", "K", "V", "scores", "mask", "weights", "heads", "output")


def invoke(*args, input=None):
    return runner.invoke(app, list(args), input=input, env={"COLUMNS": "100"})


@pytest.mark.parametrize(
    "settings",
    [
        Settings(d=16, tau=4),
        Settings(d=16, tau=4, causal=True, kernel="loop"),
        Settings(d=16, tau=4, window=3, kv_heads=2),
        Settings(d=16, tau=2, dtype="float32", positions="none", scale="sqrt"),
    ],
    ids=["plain", "causal-loop", "window-gqa", "float32"],
)
def test_each_sentence_equals_running_it_alone(settings):
    batch = run_batch(LINES, settings)
    assert batch.lengths == [11, 6, 2] and max(batch.lengths) == 11
    atol = 1e-5 if settings.dtype == "float32" else 1e-12
    for line, got in zip(LINES, batch.items, strict=True):
        alone = run(line, settings)
        assert got.labels == alone.labels
        for name in FIELDS:
            np.testing.assert_allclose(getattr(got, name), getattr(alone, name), rtol=0, atol=atol, err_msg=name)


def test_pad_keys_get_exactly_zero_weight():
    batch = run_batch(LINES, Settings(d=8, tau=2))
    padded = batch.padded[2]
    assert list(padded.tokens.strings[2:]) == [PAD] * 9
    assert (padded.weights[:, :, 2:] == 0).all() and np.isneginf(padded.mask[:, 2:]).all()
    np.testing.assert_allclose(padded.weights.sum(-1), 1.0)  # pad queries still see the real keys


def test_sentences_skips_blank_lines_and_rejects_empty():
    assert sentences("a\n\n  b c  \n") == ["a", "b c"]
    with pytest.raises(QkvError, match="at least one non-empty line"):
        sentences("\n \n")


def test_cli_table_shows_each_sentence_without_pads(tmp_path):
    f = tmp_path / "s.txt"
    f.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    r = invoke("run", "--file", str(f), "--batch", "--d", "8", "--tau", "2", "--head", "0")
    assert r.exit_code == 0, r.output
    assert "batch of 3 sentences padded to L=11" in r.output
    assert "sentence 2: m=2 (+9 pads)" in r.output
    assert PAD not in r.output.split("without its pads", 1)[1]


def test_cli_json_csv_and_npz(tmp_path):
    text = "a b c\nd e\n"
    r = invoke(
        "run", text, "--batch", "--d", "8", "--tau", "2", "--format", "json", "--save-npz", str(tmp_path / "b.npz")
    )
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["lengths"] == [3, 2] and doc["padded_length"] == 3
    assert np.array(doc["sentences"][1]["matrices"]["weights"]).shape == (2, 2, 2)
    z = np.load(tmp_path / "b.npz", allow_pickle=False)
    assert z["weights"].shape == (2, 2, 3, 3) and z["tokens"].shape == (2, 3) and z["Wq"].shape == (2, 8, 4)
    assert z["lengths"].tolist() == [3, 2] and z["padding"].tolist() == [[False] * 3, [False, False, True]]
    r = invoke("run", "-", "--batch", "--d", "8", "--tau", "2", "--format", "csv", input=text)
    lines = r.stdout.splitlines()
    assert lines[0].startswith("sentence,matrix,head")
    assert len(lines) == 1 + 2 * 9 + 2 * 4 and lines[-1].startswith("1,weights,1,1,1,e,e,")


@pytest.mark.parametrize(
    "args,message",
    [
        (["--context", "x y"], "--batch cannot be combined with --context"),
        (["--mask-file", "m.txt"], "--batch cannot be combined with --mask-file"),
    ],
)
def test_cli_errors(tmp_path, monkeypatch, args, message):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "m.txt").write_text("11\n11\n")
    r = invoke("run", "a b\nc d", "--batch", *args)
    assert r.exit_code == 2 and message in r.output


def test_bad_npz_path_fails_before_work_and_writes_nothing(tmp_path):
    r = invoke("run", "a b\nc", "--batch", "--d", "8", "--tau", "2", "--save-npz", str(tmp_path / "no" / "x.npz"))
    assert r.exit_code == 2 and "does not exist" in r.output
    assert list(tmp_path.iterdir()) == []
