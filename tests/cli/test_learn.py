"""`qkv learn`: each lesson runs its commands live (the output equals the command run alone) and explains it."""

import pytest
from typer.testing import CliRunner

from qkv_cli.cli import app
from qkv_cli.views.console.lessons import LESSONS, command_line

runner = CliRunner()
ENV = {"COLUMNS": "100", "TERM": "dumb", "NO_COLOR": "1"}


def invoke(*args):
    return runner.invoke(app, list(args), env=ENV)


def test_list_names_the_seven_questions_and_runs_nothing():
    r = invoke("learn", "--list")
    assert r.exit_code == 0, r.output
    lines = [line for line in r.stdout.splitlines() if line[:1].isdigit()]
    assert [line.split(".")[0] for line in lines] == [str(n) for n in range(1, 8)]
    assert "Why divide by sqrt(d_k)?" in r.stdout
    assert "$ qkv" not in r.stdout


@pytest.mark.parametrize("item", LESSONS, ids=[str(item.number) for item in LESSONS])
def test_each_lesson_shows_the_live_output_of_its_commands(item):
    r = invoke("learn", str(item.number))
    assert r.exit_code == 0, r.output
    assert r.stdout.startswith(f"Question {item.number} of 7: {item.question}")
    for args in item.commands:
        alone = invoke(*args)
        assert alone.exit_code == 0, alone.output
        assert f"$ {command_line(args)}\n{alone.stdout}" in r.stdout  # the command's own output, verbatim
    assert "What to read:" in r.stdout


def test_the_readings_say_what_the_output_shows():
    ablate = invoke("learn", "7").stdout
    assert "unchanged: Q, K, scores, weights" in ablate  # the output says it, and the reading quotes it
    scale = invoke("learn", "4").stdout
    assert "scale=1 (none)" in scale and "scale=16 (sqrt)" in scale and "scale=0.0625 (auto)" in scale


def test_all_lessons_in_order():
    r = invoke("learn")
    assert r.exit_code == 0, r.output
    starts = [r.stdout.index(f"Question {n} of 7:") for n in range(1, 8)]
    assert starts == sorted(starts)


@pytest.mark.parametrize("bad", ["0", "8", "-1"])
def test_a_lesson_that_does_not_exist_is_one_line_and_exit_2(bad):
    r = runner.invoke(app, ["learn", "--", bad] if bad.startswith("-") else ["learn", bad], env=ENV)
    assert r.exit_code == 2
    assert r.stdout == ""
    assert r.stderr.strip().count("\n") == 0 and "qkv learn --list" in r.stderr


def test_command_lines_are_quoted_for_a_shell():
    assert command_line(("heads", "a b", "--d", "8")) == "qkv heads 'a b' --d 8"


@pytest.mark.parametrize("item", LESSONS, ids=[str(item.number) for item in LESSONS])
def test_each_reading_is_two_sentences(item):
    import re

    sentences = re.split(r"(?<=[.?!])\s+(?=[A-Z`])", item.reading.strip())
    assert len(sentences) == 2, sentences


def test_the_readings_claims_hold_in_the_live_output():
    identity = invoke("learn", "3").stdout
    roles = [line.split()[-1] for line in identity.splitlines() if line.strip()[:1].isdigit() and "self" in line]
    assert roles == ["self", "self"], identity  # "both heads come out as `self`"
    scale = invoke("learn", "4").stdout.split("$ qkv")[1:]  # auto, none, sqrt
    rows = [[line.split() for line in part.splitlines() if line.strip()[:1].isdigit() and "mixed" in line]
            for part in scale]  # fmt: skip
    entropy = [[float(r[1]) for r in part] for part in rows]
    grad = [[float(r[9]) for r in part] for part in rows]
    assert min(entropy[0]) > 1 and max(entropy[1]) < 0.1  # unscaled: the softmax saturates (entropy near 0)
    assert max(grad[2]) < max(grad[1]) < min(grad[0])  # the gradient falls to 0, and --scale sqrt is worse still
