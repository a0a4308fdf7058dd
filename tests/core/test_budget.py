"""Memory is estimated before it is spent: huge runs are refused fast, with the estimate and a hint."""

from __future__ import annotations

import random
import tracemalloc

import pytest
from typer.testing import CliRunner

from qkv_cli.cli import app
from qkv_cli.core import budget
from qkv_cli.core.settings import Settings
from qkv_cli.errors import QkvError, TooLargeError
from qkv_cli.pipeline.seeded import estimate, run

WORDS = ["the", "animal", "did", "not", "cross", "street", "because", "it", "was", "tired", ".", ","]


def invoke(args):
    return CliRunner().invoke(app, [str(a) for a in args])


def refused(result, *fragments):
    assert result.exit_code == 2, result.output
    (line,) = result.stderr.splitlines()
    assert line.startswith("qkv: error: this run needs")
    for fragment in fragments:
        assert fragment in line, line
    return line


@pytest.fixture(scope="module")
def long_file(tmp_path_factory):
    rng = random.Random(0)
    path = tmp_path_factory.mktemp("budget") / "long.txt"
    lines = (" ".join(rng.choice(WORDS) for _ in range(20)) for _ in range(10_000))  # 200,000 words
    path.write_text("\n".join(lines))
    return path


@pytest.mark.parametrize("extra", [[], ["--tokenizer", "bpe"], ["--dtype", "float32", "--d", "64", "--tau", "1"]])
@pytest.mark.parametrize("command", ["run", "heatmap"])
def test_200k_word_file_is_refused_from_a_prefix(command, extra, long_file, tmp_path, monkeypatch):
    """Refused from a prefix of the text: the whole file is never tokenized (that alone takes seconds)."""
    from qkv_cli.text import tokens

    monkeypatch.chdir(tmp_path)
    seen = []
    real = tokens.tokenize
    monkeypatch.setattr(tokens, "tokenize", lambda text, *a, **k: seen.append(len(text)) or real(text, *a, **k))
    result = invoke([command, "--file", long_file, *extra])
    line = refused(result, "more than --max-memory", "; try ", "shorter text")
    assert ("--dtype float32" in line) == ("float32" not in extra), line  # never offered when given
    assert " GB" in line or " TB" in line
    assert seen and max(seen) < long_file.stat().st_size  # a prefix, never the whole text
    assert list(tmp_path.iterdir()) == []


def test_long_text_is_refused_from_a_prefix(long_file):
    """Tokenizing 200,000 words would take longer than refusing: only a prefix is tokenized."""
    text = long_file.read_text()
    seen = []

    def count(prefix):
        seen.append(len(prefix))
        return len(prefix.split())

    settings = Settings()
    with pytest.raises(TooLargeError, match="needs at least"):
        budget.check_text(text, count, lambda m: estimate(m, settings), 2 * 10**9)
    assert seen and max(seen) < len(text) // 4


def test_prefix_check_never_refuses_a_text_that_fits():
    """One enormous token: many characters, few tokens. The prefix probe must not refuse it."""
    text = "x" * 1_000_000
    budget.check_text(text, lambda t: 1, lambda m: 1000 * m * m, 10**9)  # 1 token: fits
    with pytest.raises(TooLargeError):
        budget.check_text(text, lambda t: len(t), lambda m: 1000 * m * m, 10**9)


def test_weights_alone_too_large_are_refused_before_reading_tokens():
    calls = []
    with pytest.raises(TooLargeError, match="needs about"):
        budget.check_text("hi", lambda t: calls.append(t) or 1, lambda m: 10**15, 10**9)
    assert calls == []


@pytest.mark.parametrize("args", [["--d", "1000000", "--tau", "1"], ["--d", "1048576", "--tau", "1024"],
                                  ["--d", "200000", "--tau", "8", "--dtype", "float32"]])  # fmt: skip
@pytest.mark.parametrize("command", ["run", "heatmap"])
def test_huge_width_is_refused_before_any_allocation(command, args, tmp_path, monkeypatch):
    """Weights are d x d: refused by the estimate, not by a MemoryError after allocating."""
    monkeypatch.chdir(tmp_path)
    invoke(["shapes", "--m", "3"])
    tracemalloc.start()
    try:
        result = invoke([command, "the cat sat", *args] + (["--head", "0"] if command == "heatmap" else []))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    refused(result, "needs about", "a smaller --d")
    assert peak < 50 * 2**20, f"{peak / 2**20:.0f} MiB allocated before refusing"


def test_cross_attention_counts_the_context(long_file):
    """Keys and values come from the context: its n x d matrices count, however short the query text is."""
    settings = Settings()
    assert estimate(1, settings, n=200_000) > 3 * 200_000 * settings.d * 8
    result = invoke(["run", "the cat", "--context-file", long_file, "--max-memory", "1GB"])
    refused(result, "needs about", "more than --max-memory 1.0 GB")


def test_max_memory_option_is_obeyed():
    small = ["the cat sat on the mat", "--d", "64", "--tau", "4"]
    line = refused(invoke(["run", *small, "--max-memory", "10KB"]), "more than --max-memory 10.0 KB")
    assert "needs about" in line
    assert invoke(["run", *small, "--max-memory", "1GB"]).exit_code == 0
    assert invoke(["run", *small, "--max-memory", "1GiB", "--format", "json"]).exit_code == 0


def test_default_is_half_the_ram(monkeypatch):
    monkeypatch.setattr(budget, "physical_memory", lambda: 3 * 2**30)
    assert budget.default_max_memory() == 3 * 2**29
    line = refused(invoke(["run", "the cat sat", "--d", "65536", "--tau", "1"]), "--max-memory 1.6 GB")
    assert "needs about" in line


@pytest.mark.parametrize(
    "text,expected",
    [("500MB", 500 * 10**6), ("2GiB", 2 * 2**30), ("1e9", 10**9), ("1E9", 10**9), (" 1.5 gb ", 1_500_000_000),
     ("4096", 4096), ("10kib", 10240), ("3 TB", 3 * 10**12), ("0.5k", 500)],
)  # fmt: skip
def test_parse_size(text, expected):
    assert budget.parse_size(text) == expected


@pytest.mark.parametrize("text", ["", "GB", "-1GB", "0", "0.0MB", "1e400", "9" * 400, "nan", "inf", "1 parsec",
                                  "1.2.3GB", "0x10", "1e-9"])  # fmt: skip
def test_parse_size_rejects(text):
    with pytest.raises(QkvError, match="e.g. 500MB, 4GB or 2GiB"):
        budget.parse_size(text)


@pytest.mark.parametrize("text,expected", [("1e-3GB", 10**6), ("2.5e3", 2500), ("1e+3KB", 10**6)])
def test_parse_size_takes_signed_exponents(text, expected):
    assert budget.parse_size(text) == expected


@pytest.mark.parametrize("text", ["0.5", "0.4B", "1e-3"])
def test_a_size_below_one_byte_is_refused_with_its_value(text):
    with pytest.raises(QkvError, match="give at least 1 byte"):
        budget.parse_size(text)


def test_estimate_counts_the_d_by_d_weights():
    d = 4096
    for tau in (1, 8, 64):
        assert budget.attention_bytes(1, 1, d, tau, 8) >= 4 * d * d * 8  # W^q, W^k, W^v (tau x d x d/tau), W^o


def test_estimate_grows_with_every_size():
    base = dict(m=100, n=100, d=64, tau=4, itemsize=8)
    b0 = budget.attention_bytes(**base)
    for key, bigger in (("m", 200), ("n", 200), ("d", 128), ("tau", 8), ("itemsize", 16)):
        assert budget.attention_bytes(**(base | {key: bigger})) > b0, key


MEDIUM = [
    (300, Settings(d=256, tau=8)),
    (300, Settings(d=256, tau=8, dtype="float32")),
    (600, Settings(d=64, tau=4, causal=True)),
    (40, Settings(d=1024, tau=2, dtype="float32")),
    (40, Settings(d=1024, tau=2, projection="identity")),
]


@pytest.mark.parametrize(
    "m,settings", MEDIUM, ids=[f"m{m}-d{s.d}-tau{s.tau}-{s.dtype}-{s.projection}" for m, s in MEDIUM]
)
def test_estimate_is_within_a_sane_factor_of_the_real_peak(m, settings):
    from qkv_cli.text.tokens import tokenize

    tokens = tokenize(" ".join(f"w{i % 50}" for i in range(m)))
    assert len(tokens) == m
    tracemalloc.start()
    try:
        result = run("unused", settings, tokens=tokens, max_memory=10**12)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    del result
    ratio = peak / estimate(m, settings)
    assert 0.5 <= ratio <= 1.5, f"peak {peak / 1e6:.1f} MB is {ratio:.2f} x the estimate"


@pytest.mark.parametrize(
    "hints,dtype,given,expected",
    [("--dtype float32, or a smaller model", "float32", (), "a smaller model"),
     ("--dtype float32, or a smaller model", "float64", (), "--dtype float32, or a smaller model"),
     ("fewer --layer, --dtype float32, or a shorter text", "float32", ("fewer --layer",), "a shorter text"),
     ("fewer --layer, --dtype float32, or a shorter text", "float32", (), "fewer --layer or a shorter text"),
     ("--dtype float32", "float32", (), "")],
)  # fmt: skip
def test_a_hint_never_offers_what_is_given(hints, dtype, given, expected):
    """--dtype float32 is no way out of a float32 run; nor is "fewer --layer" with one layer."""
    with pytest.raises(TooLargeError) as err:
        budget.check_budget(2000, 1000, hints, dtype=dtype, given=given)
    line = str(err.value)
    assert line.endswith(f"; try {expected}" if expected else "more than --max-memory 1.0 KB"), line


@pytest.mark.parametrize("command", [["run", "the cat sat"], ["generate", "the cat sat", "--max-new-tokens", "2"]])
def test_model_refusals_in_float32_offer_no_float32(tmp_path, command):
    """The weights' refusal reads as English, and neither it nor the run's offers --dtype float32 when given."""
    from tiny import make_checkpoint

    gpt = make_checkpoint(tmp_path / "gpt", "gpt2")
    for limit in ("1KB", "20KB"):  # below the weights (17.7 KB); above them, below the run (the weights count)
        r = invoke([*command, "--model", str(gpt), "--dtype", "float32", "--layer", "0", "--max-memory", limit])
        assert r.exit_code == 2, r.output
        (line,) = r.stderr.splitlines()
        assert "needs about" in line and "more than --max-memory" in line, line
        assert "--dtype float32" not in line and "fewer --layer" not in line, line
        assert not line.startswith("qkv: error: gpt's weights"), line  # "weights needs": the loading needs
    r = invoke([*command, "--model", str(gpt), "--dtype", "float64", "--max-memory", "1KB"])
    assert "loading gpt's weights needs about" in r.stderr and "try --dtype float32, or a smaller model" in r.stderr
