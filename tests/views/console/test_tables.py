"""Console tables: labels as wide as the terminal allows, compact cells when they buy room, every column into a
file, each note under its table, the scores as scores, legends only when relevant, one monotone colour ramp."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from rich.color import Color
from rich.console import Console
from typer.testing import CliRunner

from qkv_cli.cli import app
from qkv_cli.views.console.tables import LABEL_MIN, RAMP, _luminance, layout, matrix_table, shade

SENTENCE = "The animal didn't cross the street because it was too tired and sleepy."  # 14 tokens
WORDS = ["The", "animal", "didn't", "cross", "the", "street", "because", "it", "was", "too", "tired", "and",
         "sleepy", "."]  # fmt: skip
SMALL = ["--d", "16", "--tau", "2", "--head", "0"]


def run(args, columns: str | None = "100", **env):
    r = CliRunner().invoke(app, [str(a) for a in args], env={"COLUMNS": columns, **env})
    assert r.exit_code == 0, r.output
    return r.stdout


def header(text: str, first: str, last: str) -> str:
    return next(line for line in text.splitlines() if first in line and line.rstrip().endswith(last))


def rendered(table, width: int) -> str:
    console = Console(width=width, record=True, file=open(os.devnull, "w"))  # noqa: SIM115
    console.print(table)
    return console.export_text()


# ---- labels and cells ------------------------------------------------------------------------------------


def test_labels_are_whole_words_on_a_wide_terminal():
    """Regression: at 200 columns the labels were cut to 5 characters ('didn…', 'beca…')."""
    out = run(["run", SENTENCE, *SMALL], "200")
    assert header(out, "animal", ".").split() == WORDS
    assert "…" not in out


@pytest.mark.parametrize("columns", ["70", "80"])
def test_a_14_token_sentence_shows_every_column_at_80_or_fewer(columns):
    """Regression: at 80 columns it showed 10 of the 14 columns."""
    out = run(["run", SENTENCE, *SMALL], columns)
    assert "showing" not in out
    assert len(header(out, "The", ".").split()) == 14
    assert max(len(line) for line in out.splitlines()) <= int(columns)


def test_compact_cells_only_when_they_buy_room():
    wide = run(["run", SENTENCE, *SMALL], "200").split("Per-head summary")[0]
    assert re.search(r" 0\.\d\d", wide) and not re.search(r"(^| )\.\d\d", wide, re.M)
    narrow = run(["run", SENTENCE, *SMALL], "70").split("Per-head summary")[0]  # 0.82: 79 characters; .82: 65
    assert re.search(r" \.\d\d", narrow) and not re.search(r" 0\.\d\d", narrow)


def test_compact_cells_are_the_same_numbers():
    out = run(["run", SENTENCE, *SMALL, "--causal"], "70")
    doc = json.loads(run(["run", SENTENCE, *SMALL, "--causal", "--format", "json"]))
    row = next(line for line in out.splitlines() if line.startswith(" animal"))
    shown = [float(x) for x in row.split()[1:] if x != "·"]
    np.testing.assert_allclose(shown, doc["matrices"]["weights"][0][1][:2], atol=0.005)


@pytest.mark.parametrize("width", [40, 60, 80, 120, 200])
@pytest.mark.parametrize("labels", [WORDS, ["x" * 30] * 14, ["a"] * 14, [f"token{j}" for j in range(60)]])
def test_layout_fits_the_width_and_never_cuts_a_label_to_nothing(width, labels):
    n = len(labels)
    matrix = np.random.default_rng(0).random((n, n))
    table, note = matrix_table("t", matrix, labels, labels, 2, width, weights=True)
    lines = rendered(table, width).splitlines()
    assert max(len(line.rstrip()) for line in lines) <= width
    shown = len(table.columns) - 1
    assert (note is None) == (shown == n)
    heads = lines[next(i for i, line in enumerate(lines) if "───" in line) - 1].split()  # the line above the rule
    assert len(heads) == shown and all(len(h) >= min(LABEL_MIN, len(w)) for h, w in zip(heads, labels, strict=False))
    assert all(h == w or h.endswith("…") and w.startswith(h[:-1]) for h, w in zip(heads, labels, strict=False))


def test_layout_gives_full_labels_when_there_is_room_and_shares_it_when_not():
    assert layout([4, 4, 4], [3, 6, 7], 5, 200) == ([4, 6, 7], 5)
    widths, row = layout([4] * 14, [6] * 14, 7, 80)  # 2 edges + 7 + 14 x 5 = 79: the labels stay at 4
    assert widths == [4] * 14 and row == 7
    widths, row = layout([1] * 40, [3] * 40, 7, 60)  # one-character cells still get a readable label
    assert set(widths) == {3} and 2 + row + sum(w + 1 for w in widths) <= 60


# ---- off a terminal --------------------------------------------------------------------------------------


def long_sentence(n: int) -> str:
    return " ".join(f"word{j}" for j in range(n))


def test_redirected_output_keeps_every_column_and_no_trailing_spaces(tmp_path):
    """Regression: a table written to a file was cut to 80 columns, and 22 of 26 lines ended in spaces."""
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    target = tmp_path / "out.txt"
    qkv = str(Path(sys.executable).with_name("qkv"))
    with open(target, "w") as handle:
        subprocess.run([qkv, "run", long_sentence(30), *SMALL], stdout=handle, env=env, check=True, timeout=120)
    text = target.read_text()
    assert "showing" not in text
    assert header(text, "word0", "word29").split() == [f"word{j}" for j in range(30)]
    assert not [line for line in text.splitlines() if line != line.rstrip()]


def test_cli_runner_without_columns_is_a_file_too():
    text = run(["run", long_sentence(30), *SMALL], None)
    assert "showing" not in text and max(len(line) for line in text.splitlines()) > 80
    assert not [line for line in text.splitlines() if line.endswith(" ")]


def test_redirected_output_follows_columns_when_given():
    text = run(["run", long_sentence(30), *SMALL], "80")
    assert "showing 30 of 30 rows and" in text and max(len(line) for line in text.splitlines()) <= 80


# ---- notes, scores and legends ---------------------------------------------------------------------------


def test_each_note_is_under_its_table():
    """Regression: with --show q,k,scores,mask,weights the 'showing' notes came together at the end."""
    out = run(["run", long_sentence(50), *SMALL, "--show", "q,k,scores,mask,weights"], "80")  # 48 of 50 rows
    lines = out.splitlines()
    titles = [i for i, line in enumerate(lines) if re.match(r"^(Q\^|K\^|scores =|Mask \(|alpha =)", line)]
    notes = [i for i, line in enumerate(lines) if line.startswith("showing ")]
    assert len(titles) == 5 and len(notes) == 5
    for k, title in enumerate(titles):  # each note between its own title and the next one
        end = titles[k + 1] if k + 1 < len(titles) else len(lines)
        assert len([i for i in notes if title < i < end]) == 1


def test_the_scores_table_shows_the_scores_of_masked_keys():
    """Regression: the table titled 'before the mask' showed masked scores as dots; the export has them."""
    out = run(["run", "the cat sat on", "--d", "8", "--tau", "2", "--head", "0", "--causal", "--show", "scores"])
    assert "·" not in out
    doc = json.loads(run(["run", "the cat sat on", "--d", "8", "--tau", "2", "--head", "0", "--causal",
                          "--show", "scores", "--format", "json"]))  # fmt: skip
    row = next(line for line in out.splitlines() if line.startswith(" the "))
    np.testing.assert_allclose([float(x) for x in row.split()[1:]], doc["matrices"]["scores"][0][0], atol=0.005)


LEGEND = "· = masked"


@pytest.mark.parametrize(
    "extra,shown",
    [([], False), (["--causal"], True), (["--window", "2"], True), (["--causal", "--show", "scores"], False),
     (["--causal", "--show", "q,output"], False), (["--context", "a b c"], False)],
)  # fmt: skip
def test_the_masked_legend_only_when_dots_are_drawn(extra, shown):
    out = run(["run", "the cat sat on", "--d", "8", "--tau", "2", "--head", "0", *extra])
    assert (LEGEND in out) == shown
    assert ("·" in out.replace(LEGEND, "")) == shown


# ---- the colour ramp -------------------------------------------------------------------------------------


def contrast(a: float, b: float) -> float:
    return (max(a, b) + 0.05) / (min(a, b) + 0.05)


def test_the_ramp_is_monotone_and_every_cell_is_readable():
    """Regression: the ramp wobbled in hue and read white on light steel-blue in the middle."""
    values = np.linspace(0, 1, 101)
    backgrounds = [shade(v).bgcolor for v in values]
    luminance = [_luminance(c) for c in backgrounds]
    assert all(b >= a for a, b in zip(luminance, luminance[1:], strict=False))  # one direction: dark to light
    assert len(set(luminance)) == len(RAMP) and luminance[0] < 0.05 < 0.5 < luminance[-1]  # near 0: the darkest
    for v in values:
        style = shade(v)
        assert contrast(_luminance(style.bgcolor), _luminance(style.color)) >= 4.5, v  # WCAG AA for text
    assert all(c.number in RAMP and c.type.name == "EIGHT_BIT" for c in backgrounds)  # exact on 256 colours


def test_the_ramp_follows_viridis_hue_by_hue():
    """Violet, blue, teal, green, yellow: the hue (red minus blue, green) moves one way, as viridis does."""
    rgb = [Color.from_ansi(k).get_truecolor() for k in RAMP]
    greens = [g for _, g, _ in rgb]
    assert greens == sorted(greens) and rgb[0].blue > rgb[0].green and rgb[-1].red > rgb[-1].blue


def colour_codes(text: str) -> set[str]:
    return set(re.findall(r"\x1b\[[0-9;]*48;5;(\d+)", text))


def test_terminal_colours_come_from_the_ramp_and_stop_under_no_color():
    args = ["run", "the cat sat", "--d", "8", "--tau", "2", "--head", "0"]
    coloured = run(args, "100", TTY_COMPATIBLE="1", TERM="xterm-256color", NO_COLOR=None, COLORTERM=None)
    codes = colour_codes(coloured)
    assert codes and codes <= {str(k) for k in RAMP}
    plain = run(args, "100", TTY_COMPATIBLE="1", TERM="xterm-256color", NO_COLOR="1")
    assert not colour_codes(plain) and "38;5" not in plain
