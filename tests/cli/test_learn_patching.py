"""`qkv learn 7 --model M`: the translation question's live patching of the cross-attention's Q, K and V. Its
output holds `qkv patch`'s own, and its conclusion follows the measured numbers: V is said to carry the word on
tiny-translator (a T5 trained in the test on 24 sentence pairs: tests/support/encdecs.py), nothing is claimed on a
random T5, and without --model the lesson says how to run it."""

from __future__ import annotations

import json
import shlex
from types import SimpleNamespace

import numpy as np
import pytest
from typer.testing import CliRunner

from qkv_cli.cli import app
from qkv_cli.views.console.lessons import CARRIES, MARGIN, lesson, patch_line, verdict

pytestmark = pytest.mark.reference  # transformers builds (and trains) the models
ENV = {"COLUMNS": "100", "TERM": "dumb", "NO_COLOR": "1"}


def invoke(*args):
    return CliRunner().invoke(app, list(args), env=ENV)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    from encdecs import build
    from helpers import BuiltOnce

    return BuiltOnce(tmp_path_factory, build)


def measured(folder) -> dict:
    """The lesson's qkv patch run alone, as JSON: each of q, k, v's best single-head recovery."""
    args = shlex.split(patch_line(lesson(7), str(folder)))[1:]
    r = invoke(*args, "--format", "json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    return doc | {"best": {w: float(np.max(doc["recovery"][w])) for w in "qkv"}}


def test_on_a_trained_translator_v_carries_the_word_and_the_lesson_says_so(built):
    folder, _ = built("translator")
    r = invoke("learn", "7", "--model", str(folder))
    assert r.exit_code == 0, r.output
    alone = invoke(*shlex.split(patch_line(lesson(7), str(folder)))[1:])
    assert f"$ {patch_line(lesson(7), str(folder))}\n{alone.stdout}" in r.stdout  # the command's own output
    doc = measured(folder)
    best = doc["best"]
    assert doc["metric_clean"] > 0 > doc["metric_corrupted"]  # it translates: chat for cat, chien for dog
    assert best["v"] >= CARRIES and best["v"] >= MARGIN * max(best["q"], best["k"])  # the numbers show it ...
    assert "here V carries the source word" in r.stdout  # ... and only then the lesson says it
    assert f"V restores up to {best['v']:.2f}" in r.stdout.replace("\n", " ")
    assert best["q"] == 0.0  # one decoder layer: its queries read the same target in both runs


def test_on_random_weights_nothing_is_claimed(built):
    folder, _ = built("t5")
    r = invoke("learn", "7", "--model", str(folder))
    assert r.exit_code == 0, r.output
    text = r.stdout.replace("\n", " ")
    assert "carries the source word" not in text and "nothing is claimed" in text


def test_without_a_model_the_lesson_says_how_to_run_it():
    r = invoke("learn", "7")
    assert r.exit_code == 0, r.output
    text = r.stdout.replace("\n", " ")
    assert "qkv learn 7 --model" in text and "nothing is claimed here without one" in text
    assert "$ qkv patch" not in r.stdout


def test_a_decoder_model_is_refused_in_one_line(tmp_path):
    from clitools import assert_one_line_error
    from tiny import make_checkpoint

    gpt2 = make_checkpoint(tmp_path / "gpt2", "gpt2")
    assert_one_line_error(invoke("learn", "7", "--model", str(gpt2)), "--target", "encoder-decoder")


@pytest.mark.parametrize("best, clean, corrupted, says", [
    ({"q": 0.0, "k": 0.1, "v": 0.9}, 3.0, -3.0, "here V carries"),
    ({"q": 0.0, "k": 0.5, "v": 0.9}, 3.0, -3.0, "do not single out V"),  # K too: less than twice
    ({"q": 0.0, "k": 0.0, "v": 0.4}, 3.0, -3.0, "do not single out V"),  # too little
    ({"q": 0.0, "k": 0.0, "v": 0.9}, -1.0, -3.0, "nothing is claimed"),  # the clean source is not translated
])  # fmt: skip
def test_the_verdict_follows_the_numbers(best, clean, corrupted, says):
    grids = {w: np.array([[0.0, v]]) for w, v in best.items()}
    p = SimpleNamespace(model="m", answer=(1, "chat"), wrong=(2, "chien"), metric_clean=clean,
                        metric_corrupted=corrupted, recovery=grids)  # fmt: skip
    assert says in verdict(p, 200)
