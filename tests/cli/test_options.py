"""A newcomer's first steps: comma lists for --head and --layer, plain metavars read from the registries, every
option the help offers accepted, shell completion, a hint to quote TEXT, and `qkv` alone."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from clitools import SMALL, assert_one_line_error, invoke

from qkv_cli.cli import app
from qkv_cli.cli.options import KERNELS, SCALES, TOKENIZERS
from qkv_cli.cli.usage import plain_metavars
from qkv_cli.core.settings import ABLATE, DTYPES, POSITIONS

QKV = shutil.which("qkv") or str(Path(sys.executable).with_name("qkv"))


def ok(args, **kwargs):
    r = invoke(args, **kwargs)
    assert r.exit_code == 0, r.output
    return r


def weights_of(args) -> dict:
    return json.loads(ok([*args, "--format", "json"]).stdout)["matrices"]["weights"]


# ---- --head and --layer take a comma list, or repeat -----------------------------------------------------


@pytest.mark.parametrize("heads", [["--head", "0,2"], ["--head", "0", "--head", "2"], ["--head", " 0 , 2 "]])
def test_head_takes_a_comma_list_or_repeats(heads):
    base = ["run", "the cat sat", "--d", "16", "--tau", "4"]
    everything = weights_of(base)
    assert weights_of([*base, *heads]) == [everything[0], everything[2]]


def test_head_comma_list_mixes_with_repeats_and_drops_duplicates():
    base = ["run", "the cat sat", "--d", "16", "--tau", "4"]
    everything = weights_of(base)
    assert weights_of([*base, "--head", "3,1", "--head", "1"]) == [everything[3], everything[1]]


@pytest.mark.parametrize(
    "value,fragments",
    [("0,x", ["--head", "'x'", "not an integer"]), ("1.5", ["'1.5'", "integer"]), ("0,,1", ["''", "integer"]),
     ("0,9", ["--head 9", "0..1"])],
)  # fmt: skip
def test_a_bad_head_in_a_list_is_one_line(value, fragments):
    line = assert_one_line_error(invoke(["run", "hi", *SMALL, "--head", value]), *fragments)
    assert "Input should be" not in line  # not pydantic's wording


@pytest.mark.parametrize(
    "args,fragments",
    [(["explain", "hi", "--head", "0,1"], ["--head", "'0,1' is not an integer"]),
     (["run", "hi", "--d", "abc"], ["--d", "'abc' is not an integer"]),
     (["generate", "hi", "--temperature", "hot"], ["'hot' is not a number"]),
     (["run", "hi", "--tau", "0"], ["'0'", "greater than or equal to 1"]),
     (["run", "hi", "--format", "xml"], ["'xml' is not one of 'table', 'json', 'csv'"])],
)  # fmt: skip
def test_errors_are_in_plain_words_not_pydantics(args, fragments):
    line = assert_one_line_error(invoke(args), *fragments)
    assert "Input should be" not in line and "Value error" not in line and "unable to parse" not in line


@pytest.fixture(scope="module")
def bert(tmp_path_factory):
    from tiny import make_checkpoint

    return make_checkpoint(tmp_path_factory.mktemp("tiny") / "bert", "bert")


@pytest.mark.parametrize("layers", [["--layer", "0,-1"], ["--layer", "0", "--layer", "-1"]])
def test_layer_takes_a_comma_list_or_repeats(bert, layers):
    doc = json.loads(ok(["run", "the cat sat", "--model", bert, *layers, "--format", "json"]).stdout)
    assert sorted(doc["layers"]) == ["0", "1"]  # the tiny checkpoint has 2 layers: -1 is layer 1
    table = ok(["run", "the cat sat", "--model", bert, *layers, "--head", "0"]).stdout
    assert "layer 0: alpha" in table and "layer 1: alpha" in table


# ---- metavars: what to type, with the registries' choices ------------------------------------------------

PLAIN = re.compile(r"^(INTEGER|FLOAT|TEXT|PATH|SIZE|NAMES|NAME\|PATH|\[[a-z0-9_-]+(\|[a-z0-9_-]+)*(\|[A-Z]+)?\])$")


def commands():
    """The click group `qkv` runs, with the metavars its --help shows."""
    group = typer.main.get_command(app)
    plain_metavars(group)
    return group, sorted(group.commands)


def help_of(*args) -> str:
    return ok([*args, "--help"], env={"COLUMNS": "200"}).stdout


def metavars(command: str) -> dict[str, str]:
    """--option -> the metavar its --help shows (from the option's own help record, as --help prints it)."""
    group, _ = commands()
    cmd = group.commands[command]
    ctx = group.commands[command].make_context(command, [], resilient_parsing=True)
    found = {}
    for param in cmd.params:
        record = param.get_help_record(ctx)
        if param.param_type_name == "option" and record:
            names = record[0].split(" / ")[0]
            flag, _, meta = names.rpartition(", ")[-1].partition(" ")
            if meta:
                found[param.opts[0] if param.opts[0].startswith("--") else flag] = meta
    return found


@pytest.mark.parametrize("command", commands()[1])
def test_every_metavar_is_plain(command):
    text = help_of(command)
    assert "<" not in text.split("Options:")[-1].replace("V_<=i", "").replace("<=x<=", "").replace("x>=", "")
    assert not re.search(r"<(str|int|float|list|path)", text), text
    found = metavars(command)
    assert found or command == "learn", text  # qkv learn has only a flag (--list) and the argument N
    bad = {opt: meta for opt, meta in found.items() if not PLAIN.match(meta)}
    assert not bad, bad
    assert "TEXT <str>" not in text and "[text]" not in text  # the argument is TEXT, as in the usage line


@pytest.mark.parametrize(
    "option,values",
    [("--kernel", KERNELS), ("--dtype", DTYPES), ("--positions", POSITIONS), ("--ablate", ABLATE),
     ("--tokenizer", TOKENIZERS), ("--scale", SCALES)],
)  # fmt: skip
def test_choices_in_metavars_come_from_the_registries(option, values):
    meta = metavars("run")[option]
    assert meta.strip("[]").split("|")[: len(values)] == list(values)


def test_head_layer_and_paths_say_integer_and_path():
    found = metavars("run")
    assert found["--head"] == found["--layer"] == found["--d"] == found["--heads"] == "INTEGER"
    assert found["--file"] == found["--save-npz"] == found["--mask-file"] == "PATH"
    assert found["--format"] == "[table|json|csv]"
    assert metavars("heatmap")["--out"] == "PATH"
    assert "--head INTEGER" in help_of("run") and "--kernel [vectorized|loop" in help_of("run")


def test_scale_and_tokenizer_names_are_what_the_core_takes():
    from qkv_cli.core.kernels import resolve_scale
    from qkv_cli.text.tokens import tokenize

    assert all(resolve_scale(s, 4) > 0 for s in SCALES)
    assert all(tokenize("the cat", t).strings for t in TOKENIZERS)


# ---- every option offered is accepted --------------------------------------------------------------------


def sample_values(param) -> list[list[str]]:
    """Argument lists that give `param` a valid value: each of its choices, or one value of its kind."""
    flag = param.opts[0]
    if getattr(param, "is_flag", False):
        return [[flag]]
    meta = param.metavar or ""
    if meta.startswith("["):
        return [[flag, c] for c in meta.strip("[]").split("|") if not c.isupper()]
    return [[flag, {"INTEGER": "1", "FLOAT": "0.5", "SIZE": "1GB", "NAMES": "q,weights"}.get(meta, "x.txt")]]


def offered():
    group, names = commands()
    for name in names:
        command = group.commands[name]
        for param in command.params:
            if param.param_type_name != "option" or param.is_eager or param.hidden:
                continue
            for args in sample_values(param):
                yield name, args


@pytest.mark.parametrize("name,args", list(offered()), ids=lambda x: x if isinstance(x, str) else " ".join(x))
def test_every_option_offered_is_accepted_by_the_parser(name, args):
    group, _ = commands()
    root = group.make_context("qkv", [name], resilient_parsing=True)
    with group.commands[name].make_context(name, list(args), parent=root):  # raises UsageError if refused
        pass


@pytest.mark.parametrize("kernel", list(KERNELS))
@pytest.mark.parametrize("scale", [*SCALES, "0.5"])
def test_every_named_kernel_and_scale_runs(kernel, scale):
    ok(["run", "the cat", *SMALL, "--kernel", kernel, "--scale", scale, "--format", "json"])


def test_the_root_help_offers_completion_and_accepts_it():
    text = ok(["--help"]).stdout
    assert "--install-completion" in text and "--show-completion" in text
    r = ok(["--show-completion", "bash"])
    assert "_QKV_COMPLETE=complete_bash" in r.stdout and "complete -o default -F _qkv_completion qkv" in r.stdout


# ---- shell completion ------------------------------------------------------------------------------------


def complete(words: str) -> list[str]:
    """What bash would get back from `qkv` for the command line `words` (the cursor at its end)."""
    cword = len(words.split()) - (0 if words.endswith(" ") else 1)
    env = {**_env(), "_QKV_COMPLETE": "complete_bash", "COMP_WORDS": words, "COMP_CWORD": str(cword)}
    done = subprocess.run([QKV], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "error" not in done.stderr, done.stderr
    return done.stdout.split()


def _env() -> dict:
    import os

    return {k: v for k, v in os.environ.items() if not k.startswith("_QKV")}


@pytest.mark.parametrize(
    "words,expected",
    [("qkv ru", ["run"]), ("qkv he", ["heatmap", "heads"]), ("qkv run --ker", ["--kernel"]),
     ("qkv run --kernel ", list(KERNELS)), ("qkv run --format j", ["json"]), ("qkv run --tokenizer b", ["bpe"]),
     ("qkv --show", ["--show-completion"])],
)  # fmt: skip
def test_completion_completes_commands_options_and_choices(words, expected):
    assert complete(words) == expected


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_the_shown_bash_script_completes_in_bash():
    script = subprocess.run([QKV, "--show-completion", "bash"], capture_output=True, text=True, timeout=60).stdout
    code = f'{script}\nCOMP_WORDS=(qkv run --kern); COMP_CWORD=2; _qkv_completion qkv; echo "${{COMPREPLY[@]}}"'
    env = {**_env(), "PATH": f"{Path(QKV).parent}:{_env().get('PATH', '')}"}  # bash calls `qkv` as the shell would
    done = subprocess.run(["bash", "--norc", "-c", code], capture_output=True, text=True, timeout=60, env=env)
    assert done.stdout.split() == ["--kernel"], done.stderr


@pytest.fixture
def no_shell_ancestor(monkeypatch):
    """As under a process manager or an IDE's test runner: no shell among the parent processes."""
    import shellingham

    def fails(*_args, **_kwargs):
        raise shellingham.ShellDetectionFailure()

    monkeypatch.setattr(shellingham, "detect_shell", fails)


@pytest.mark.parametrize("shell,marker", [("/usr/bin/zsh", "compdef _qkv_completion qkv"),
                                          ("/bin/bash", "complete -o default -F _qkv_completion qkv"),
                                          ("/usr/local/bin/fish", "complete --command qkv")])  # fmt: skip
def test_completion_reads_the_shell_from_SHELL_when_no_parent_is_one(no_shell_ancestor, monkeypatch, shell, marker):
    monkeypatch.setenv("SHELL", shell)
    assert marker in ok(["--show-completion"]).stdout


def test_a_shell_named_on_the_command_line_wins(no_shell_ancestor, monkeypatch, tmp_path):
    """`--show-completion bash` and `--install-completion bash` give bash's, whatever $SHELL and the parents say."""
    monkeypatch.setenv("SHELL", "/usr/bin/zsh")
    assert "complete -o default -F _qkv_completion qkv" in ok(["--show-completion", "bash"]).stdout
    r = invoke(["--install-completion", "bash"], env={"HOME": str(tmp_path), "SHELL": "/usr/bin/zsh"})
    assert r.exit_code == 0 and "bash completion installed" in r.stdout, r.output


@pytest.mark.parametrize("shell", [None, "/bin/tcsh"])
def test_no_shell_to_be_found_is_one_line(no_shell_ancestor, monkeypatch, shell):
    if shell is None:
        monkeypatch.delenv("SHELL", raising=False)
    else:
        monkeypatch.setenv("SHELL", shell)
    assert_one_line_error(invoke(["--show-completion"]), "which shell", "--show-completion bash")


def test_install_completion_writes_the_script(tmp_path):
    r = invoke(["--install-completion", "bash"], env={"HOME": str(tmp_path)})
    assert r.exit_code == 0, r.output
    assert "bash completion installed" in r.stdout
    assert "_QKV_COMPLETE" in (tmp_path / ".bash_completions" / "qkv.sh").read_text()
    assert "qkv.sh" in (tmp_path / ".bashrc").read_text()


def test_a_root_error_is_not_prefixed_twice():
    line = assert_one_line_error(invoke(["--no-such-option"]), "--no-such-option", "qkv --help")
    assert line.count("qkv:") == 1, line
    line = assert_one_line_error(invoke(["run", "hi", "--bogus"]), "qkv run: ", "--bogus")  # a command names itself
    assert not line.startswith("qkv: error: qkv: "), line


# ---- TEXT that the shell split, and `qkv` alone ----------------------------------------------------------


@pytest.mark.parametrize(
    "args,hint",
    [(["run", "The", "cat", "sat"], 'qkv run "The cat sat"'), (["explain", "the", "cat", "--d", "8"],
     'qkv explain "the cat"'), (["run", "it's", "warm"], 'qkv run "it\'s warm"')],
)  # fmt: skip
def test_unquoted_text_gets_a_hint_to_quote_it(args, hint):
    assert_one_line_error(invoke(args), "unexpected extra argument", "in quotes", hint)


def test_no_quote_hint_for_a_command_without_text():
    line = assert_one_line_error(invoke(["models", "extra"]), "unexpected extra argument")
    assert "quotes" not in line and "qkv models --help" in line


def test_qkv_alone_prints_a_short_usage_with_three_examples_that_run(tmp_path, monkeypatch):
    r = ok([])
    lines = r.stdout.splitlines()
    assert lines[0].startswith("Usage: qkv COMMAND") and len(lines) <= 15
    examples = [line.strip() for line in lines if line.startswith("  qkv ")]
    assert len(examples) == 3
    assert "Commands: " in r.stdout and "run" in r.stdout and "--help" in r.stdout
    assert "Options:" not in r.stdout  # not the full help
    monkeypatch.chdir(tmp_path)
    import shlex

    for example in examples:
        ok(shlex.split(example)[1:])
