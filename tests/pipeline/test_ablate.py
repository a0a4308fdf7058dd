"""--ablate q|k|v: which matrices change when one projection's output is replaced."""

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from qkv_cli.cli import app
from qkv_cli.core.settings import Settings
from qkv_cli.errors import QkvError
from qkv_cli.pipeline.ablate import max_change
from qkv_cli.pipeline.seeded import run

runner = CliRunner()
TEXT = "the animal did not cross the street because it was tired"


def invoke(*args):
    return runner.invoke(app, list(args), env={"COLUMNS": "100"})


@pytest.mark.parametrize("how", ["zeros", "noise"])
def test_ablating_v_keeps_every_weight_and_changes_the_output(how):
    s = Settings(d=16, tau=4, causal=True)
    intact, ablated = run(TEXT, s), run(TEXT, Settings(d=16, tau=4, causal=True, ablate="v", ablate_with=how))
    np.testing.assert_array_equal(ablated.weights, intact.weights)
    np.testing.assert_array_equal(ablated.scores, intact.scores)
    assert not np.allclose(ablated.output, intact.output)
    rep = ablated.ablation
    assert rep["target"] == "V" and rep["with"] == how
    assert rep["max_change"]["weights"] == 0 and rep["max_change"]["Q"] == 0 and rep["max_change"]["K"] == 0
    assert rep["max_change"]["output"] > 0 and rep["max_change"]["heads"] > 0


@pytest.mark.parametrize("which", ["q", "k"])
def test_zero_q_or_k_gives_uniform_weights_over_allowed_keys(which):
    r = run(TEXT, Settings(d=16, tau=4, causal=True, ablate=which))
    m = r.weights.shape[1]
    expected = np.tril(np.ones((m, m))) / np.arange(1, m + 1)[:, None]
    np.testing.assert_allclose(r.weights, np.broadcast_to(expected, r.weights.shape), atol=1e-12)
    assert r.ablation["max_change"]["weights"] > 0


def test_noise_is_seeded_and_keeps_the_scale():
    a = run(TEXT, Settings(d=16, tau=4, ablate="q", ablate_with="noise", seed=3))
    b = run(TEXT, Settings(d=16, tau=4, ablate="q", ablate_with="noise", seed=3))
    c = run(TEXT, Settings(d=16, tau=4, ablate="q", ablate_with="noise", seed=4))
    intact = run(TEXT, Settings(d=16, tau=4, seed=3))
    np.testing.assert_array_equal(a.Q, b.Q)
    assert not np.array_equal(a.Q, c.Q) and not np.array_equal(a.Q, intact.Q)
    assert 0.5 < a.Q.std() / intact.Q.std() < 2


def test_bad_choices():
    with pytest.raises(QkvError, match="unknown --ablate 'x': choose one of q, k, v"):
        Settings(ablate="x")
    with pytest.raises(QkvError, match="unknown --ablate-with 'ones': choose one of zeros, noise"):
        Settings(ablate="v", ablate_with="ones")
    r = invoke("run", "a b", "--ablate", "w")
    assert r.exit_code == 2 and "--ablate" in r.output


def test_cli_reports_what_changed():
    r = invoke("run", TEXT, "--d", "16", "--tau", "4", "--head", "0", "--ablate", "v")
    assert r.exit_code == 0, r.output
    assert "ablate=V (zeros)" in r.output
    assert "ablated V (zeros): max |change| vs the intact run" in r.output
    assert "unchanged: Q, K, scores, weights" in r.output
    r = invoke("run", TEXT, "--d", "16", "--tau", "4", "--ablate", "k", "--ablate-with", "noise", "--format", "json")
    doc = json.loads(r.stdout)
    assert doc["settings"]["ablate"] == "k" and doc["ablation"]["max_change"]["V"] == 0
    assert doc["ablation"]["max_change"]["weights"] > 0


def test_max_change_treats_equal_minus_inf_as_no_change():
    assert max_change([0.0, -np.inf], [0.0, -np.inf]) == 0
    assert max_change([1.0, -np.inf], [0.5, -np.inf]) == 0.5
