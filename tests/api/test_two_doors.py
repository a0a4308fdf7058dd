"""One implementation, two doors: the CLI's commands run through the API's `execute`, `qkv heatmap` saves the very
Figure `qkv.heatmap` returns, and each kind of run has its own result class with only its own fields."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from clitools import invoke
from tiny import make_checkpoint

import qkv_cli as qkv
from qkv_cli.api import commands
from qkv_cli.core import result as records
from qkv_cli.views.figures import heatmaps as figures

TEXT = "the cat sat on the mat"
RANDOM = ["--d", "8", "--heads", "2", "--causal"]


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory):
    folder = tmp_path_factory.mktemp("doors") / "llama"
    return make_checkpoint(folder, "llama", config_overrides={"tie_word_embeddings": True})


@pytest.fixture
def executed(monkeypatch):
    """The kinds of the results the commands got from api.commands.execute, in order."""
    seen = []
    real = commands.execute

    def spy(req, model=None, on_token=None, on_layer=None):
        out = real(req, model, on_token, on_layer)
        seen.append(out.result.kind.value)
        return out

    monkeypatch.setattr(commands, "execute", spy)
    return seen


@pytest.mark.parametrize(
    "args, kind",
    [
        (["run", TEXT, *RANDOM], "dense"),
        (["run", TEXT, *RANDOM, "--window", "2", "--format", "json"], "dense"),
        (["explain", TEXT, *RANDOM], "dense"),
        (["attribute", TEXT, *RANDOM], "attribution"),
        (["heatmap", TEXT, *RANDOM, "--out", "{tmp}/a.png"], "dense"),
        (["view", TEXT, *RANDOM, "--out", "{tmp}/a.html"], "dense"),
    ],
)
def test_commands_run_through_the_apis_execute(args, kind, executed, tmp_path):
    result = invoke([a.replace("{tmp}", str(tmp_path)) for a in args])
    assert result.exit_code == 0, result.output
    assert executed == [kind]


def test_checkpoint_commands_run_through_execute(tiny_llama, executed, tmp_path):
    for args in (["run", TEXT, "--model", tiny_llama], ["generate", "the cat", "--model", tiny_llama,
                 "--max-new-tokens", "2", "--format", "json"]):  # fmt: skip
        result = invoke([str(a) for a in args])
        assert result.exit_code == 0, result.output
    assert executed == ["model", "generation"]


def pixels(fig) -> np.ndarray:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    return np.asarray(canvas.buffer_rgba()).copy()


def test_qkv_heatmap_saves_the_figure_qkv_heatmap_returns(monkeypatch, tmp_path):
    saved = []
    monkeypatch.setattr(figures, "save_figure", lambda fig, path: saved.append(fig))
    result = invoke(["heatmap", TEXT, *RANDOM, "--head", "1", "--title", "T", "--cmap", "magma", "--out",
                     str(tmp_path / "a.png")])  # fmt: skip
    assert result.exit_code == 0, result.output
    fig = qkv.heatmap(qkv.run(TEXT, d=8, heads=2, causal=True), heads=[1], title="T", cmap="magma")
    (cli,) = saved
    assert [t.get_text() for t in cli.texts] == [t.get_text() for t in fig.texts]
    np.testing.assert_array_equal(pixels(cli), pixels(fig))


def test_a_page_refused_above_its_limit_names_the_keyword(tmp_path):
    page = qkv.page(qkv.run(TEXT, d=8, heads=2))
    refused = (
        r"more than max_page_size 1.0 KB: shrink it with a shorter text, or raise the limit, e.g. "
        r"max_page_size='1\d\d.\dKB'"
    )
    with pytest.raises(qkv.QkvError, match=refused):
        page.save(tmp_path / "p.html", max_page_size="1KB")
    assert not (tmp_path / "p.html").exists()
    assert page.save(tmp_path / "p.html", max_page_size="10MB") == str(tmp_path / "p.html")
    assert "layer" in page.holds and "heads" in page.holds


def names(cls) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)}


def test_each_kind_of_result_holds_only_its_own_fields():
    base = names(records.Result)
    assert {"tokens", "settings", "model", "kernel"} <= base
    assert not base & {"weights", "attentions", "band", "step_ids", "items", "attribution"}
    layer, band, model = names(records.LayerResult), names(records.BandResult), names(records.ModelResult)
    generation, batch = names(records.GenerationResult), names(records.BatchResult)
    assert {"Q", "K", "V", "weights", "mask"} <= layer and not layer & {"attentions", "band", "step_ids", "padded"}
    assert "band" in band and not band & {"weights", "scores", "mask", "attentions"}
    assert "attentions" in model and not model & {"H", "Q", "weights", "band", "step_ids"}
    assert "step_attentions" in generation and not generation & {"H", "weights", "attentions", "layers"}
    assert batch - base == {"padded", "items", "lengths"}
    assert names(records.AttributionResult) - layer == {"method", "attribution", "attribution_heads",
                                                         "value_norms", "head_fusion", "cost", "ids"}  # fmt: skip
    with pytest.raises(AttributeError):
        records.BatchResult(tokens=None).weights  # noqa: B018 (a field another kind holds is not there)


def test_every_kind_has_its_ids(tiny_llama):
    """ids: the tokenizer's for a checkpoint (its every kind), None for the word tokenizer of random weights."""
    from qkv_cli.models import load_model

    want = list(load_model(str(tiny_llama)).tokenize(TEXT).ids)
    run = qkv.run(TEXT, model=str(tiny_llama))
    assert run.ids.tolist() == run.layer(0).ids.tolist() == want
    assert qkv.attribute(TEXT, model=str(tiny_llama)).ids.tolist() == want
    assert qkv.generate(TEXT, model=str(tiny_llama), max_new_tokens=1).ids.tolist()[: len(want)] == want
    assert qkv.run(TEXT, d=8, heads=2).ids is None
    assert qkv.run(TEXT, d=8, heads=2, tokenizer="bpe").ids is not None


def test_the_api_returns_the_records_of_each_kind(tiny_llama):
    assert isinstance(qkv.run(TEXT, d=8, heads=2).result, records.LayerResult)
    from qkv_cli.pipeline.band import BAND_MIN_TOKENS

    long = " ".join(["the cat sat on the mat"] * (BAND_MIN_TOKENS // 6 + 1))
    band = qkv.run(long, d=8, heads=2, window=2, band=True).result
    assert isinstance(band, records.BandResult) and band.kind == records.Kind.BAND
    run = qkv.run(TEXT, model=str(tiny_llama))
    assert isinstance(run.result, records.ModelResult) and run.result.kind == records.Kind.MODEL
    layer = run.layer(-1).result
    assert isinstance(layer, records.LayerResult) and layer.kind == records.Kind.LAYER
    a = qkv.attribute(TEXT, d=8, heads=2).result
    assert isinstance(a, records.AttributionResult) and a.kind == records.Kind.ATTRIBUTION
    assert isinstance(qkv.generate("the cat", model=str(tiny_llama), max_new_tokens=1).result, records.GenerationResult)
