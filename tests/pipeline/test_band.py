"""Long documents under --window keep only the band, and it equals the dense run on the band."""

import numpy as np
from typer.testing import CliRunner

from qkv_cli.cli import app
from qkv_cli.core.band import band_to_dense
from qkv_cli.core.settings import Settings
from qkv_cli.core.stats import band_summary, strongest_links
from qkv_cli.pipeline import band as longdoc
from qkv_cli.pipeline.seeded import run

TEXT = "the quick brown fox jumps over the lazy dog and then it sleeps under a warm tree for a while"


def test_band_run_equals_dense_run(monkeypatch):
    monkeypatch.setattr(longdoc, "BAND_MIN_TOKENS", 8)
    s = Settings(d=16, tau=4, window=3)
    band = longdoc.run(TEXT, s)
    dense = run(TEXT, s)
    assert band.kind == "band" and band.band.shape == (4, len(dense.labels), 3)
    np.testing.assert_allclose(band_to_dense(band.band), dense.weights, atol=1e-12)
    np.testing.assert_allclose(band.output, dense.output, atol=1e-12)
    summary = band_summary(band.band, [0])[0]
    assert 0 < summary["self_share"] < 1 and 0 <= summary["mean_distance"] <= 2
    i, k, w = strongest_links(band.band, band.band_keys, 0, k=1)[0]
    assert 0 < i - k < 3 and w == dense.weights[0, i, k] == dense.weights[0].max(
        where=~np.eye(len(TEXT.split()), dtype=bool), initial=0
    )  # noqa: E501


def test_short_text_keeps_the_dense_result():
    assert longdoc.run("a b c", Settings(d=8, tau=2, window=2)).kind == "dense"


def test_cli_long_window_run_prints_summary_and_exports_band(tmp_path, monkeypatch):
    monkeypatch.setattr(longdoc, "BAND_MIN_TOKENS", 8)
    out = tmp_path / "band.npz"
    r = CliRunner().invoke(app, ["run", TEXT, "--d", "16", "--heads", "2", "--window", "4", "--save-npz", str(out)])
    assert r.exit_code == 0, r.output
    assert "band only" in r.output and "Strongest links" in r.output
    z = np.load(out, allow_pickle=False)
    m = len(TEXT.split())
    assert z["weights_band"].shape == (2, m, 4) and z["band_keys"].shape == (m, 4)
    assert "weights" not in z.files and int(z["window"]) == 4
    np.testing.assert_allclose(z["weights_band"].sum(-1), 1, atol=1e-12)
    csv_out = CliRunner().invoke(app, ["run", TEXT, "--d", "16", "--heads", "2", "--window", "4", "--format", "csv"])
    rows = csv_out.stdout.strip().splitlines()[1:]
    assert len(rows) == 2 * (4 * m - 6)  # each query sees min(i + 1, 4) keys
