"""Tokenization (word, shipped BPE, any tokenizer.json) and the sample texts."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from qkv_cli.errors import QkvError
from qkv_cli.text.samples import default_text, sample_dir, sample_names, sample_text
from qkv_cli.text.tokens import BPE_PATH, Tokens, _label, encode, load_tokenizer, tokenize

SAMPLES = ["bilingual_en", "bilingual_fr", "coreference", "long", "numbers", "paragraph", "repeated", "sentences"]


def assert_clean_labels(t: Tokens) -> None:
    for label in t.labels:
        assert label and label.strip() == label, label
        assert not label.startswith("##") and "Ġ" not in label and "▁" not in label, label


# --- the word tokenizer -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, expected",
    [
        (
            "The animal didn't cross the street because it was too tired.",
            ["The", "animal", "didn't", "cross", "the", "street", "because", "it", "was", "too", "tired", "."],
        ),
        ("It cost $3.50, not 1,000!", ["It", "cost", "$", "3.50", ",", "not", "1,000", "!"]),
        ("Wait... what?", ["Wait", ".", ".", ".", "what", "?"]),
        ("  la  balle\trouge\n", ["la", "balle", "rouge"]),
        ("qu'il était", ["qu'il", "était"]),
        ("5A-5C (room 4B)", ["5A", "-", "5C", "(", "room", "4B", ")"]),
    ],
)
def test_word_tokens(text, expected):
    t = tokenize(text)
    assert list(t.strings) == expected
    assert list(t.labels) == expected
    assert t.ids is None
    assert len(t) == len(expected)
    assert [text[a:b] for a, b in t.offsets] == expected


@settings(max_examples=200, deadline=None)
@given(st.text(min_size=1, max_size=60).filter(lambda s: not s.isspace()))
def test_word_offsets_round_trip(text):
    try:
        t = tokenize(text)
    except QkvError:  # Rust and Python disagree on a few exotic whitespace characters
        return
    ends = 0
    for s, (a, b) in zip(t.strings, t.offsets, strict=True):
        assert text[a:b] == s and s
        assert a >= ends
        ends = b
    assert all(t.labels)


def test_tokens_is_frozen_and_checks_lengths():
    t = tokenize("a b")
    with pytest.raises(AttributeError):
        t.strings = ("x",)  # type: ignore[misc]
    with pytest.raises(QkvError, match="2 strings, 1 labels"):
        Tokens(strings=("a", "b"), labels=("a",), offsets=((0, 1), (2, 3)))


# --- the shipped BPE ----------------------------------------------------------------------------------


def test_bpe_common_words_are_single_tokens():
    t = tokenize("The animal didn't cross the street", "bpe")
    assert t.strings[:2] == ("The", "Ġanimal")
    assert t.labels[:2] == ("The", "animal")
    assert "street" in t.labels
    assert t.ids is not None and len(t.ids) == len(t)
    assert_clean_labels(t)


@pytest.mark.parametrize("word", ["Photosynthesis", "unbelievably", "Zanzibar"])
def test_bpe_splits_a_rare_word_into_pieces_covering_it(word):
    text = f"The {word} was here."
    t = tokenize(text, "bpe")
    start, end = text.index(word), text.index(word) + len(word)
    pieces = [(s, (a, b)) for s, (a, b) in zip(t.strings, t.offsets, strict=True) if start <= a < end]
    assert len(pieces) >= 2, t.strings
    assert pieces[0][1][0] == start and pieces[-1][1][1] == end
    for (_, (_, b)), (_, (a, _)) in zip(pieces, pieces[1:], strict=False):
        assert b == a  # contiguous: together the pieces cover the word exactly
    assert "".join(s.lstrip("Ġ") for s, _ in pieces) == word


def test_bpe_labels_for_spaces_newlines_and_split_characters():
    t = tokenize("déjà  vu\n🙂", "bpe")
    assert "␣" in t.labels and "↵" in t.labels
    assert "à" in t.labels and "🙂" in t.labels  # byte pieces of one character are labelled with that character
    assert_clean_labels(t)


def test_bpe_file_is_small_and_rebuilds_identically(tmp_path):
    from qkv_cli.text.data import build_bpe

    assert BPE_PATH.stat().st_size < 200_000
    tok = load_tokenizer(BPE_PATH)
    assert 1000 <= tok.get_vocab_size() <= 2000
    out = tmp_path / "bpe.json"
    build_bpe.main(["--output", str(out)])
    assert out.read_bytes() == BPE_PATH.read_bytes(), "run python -m qkv_cli.data.build_bpe"


def test_metaspace_labels(tmp_path):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    trainer = trainers.BpeTrainer(vocab_size=200, special_tokens=["<unk>"], show_progress=False)
    tok.train_from_iterator(sample_text("sentences").splitlines(), trainer=trainer)
    tok.save(str(tmp_path / "tokenizer.json"))
    t = tokenize("the sea", str(tmp_path))
    assert any(s.startswith("▁") for s in t.strings)
    assert_clean_labels(t)


@pytest.mark.parametrize(
    "raw, byte_level, label",
    [
        ("##ing", False, "ing"),
        ("##", False, "##"),
        ("▁the", False, "the"),
        ("▁", False, "␣"),
        ("[CLS]", False, "[CLS]"),
        ("Ġcat", True, "cat"),
        ("Ġ", True, "␣"),
        ("ĠĠ", True, "␣␣"),
        ("Ċ", True, "↵"),
        ("ĉ", True, "⇥"),
        ("Ã©", True, "é"),
        ("", False, "∅"),
    ],
)
def test_label_cleanup(raw, byte_level, label):
    assert _label(raw, byte_level) == label


# --- a Hugging Face tokenizer.json: MiniLM (BERT WordPiece) ----------------------------------------------


def test_minilm_special_tokens_and_labels(minilm):
    text = "The animal didn't cross the street because it was unbelievably tired."
    t = tokenize(text, str(minilm), add_special_tokens=True)
    assert t.strings[0] == "[CLS]" and t.strings[-1] == "[SEP]"
    assert t.offsets[0] == (0, 0) and t.offsets[-1] == (0, 0)
    assert t.ids is not None and t.ids[0] == 101 and t.ids[-1] == 102
    assert any(s.startswith("##") for s in t.strings)
    assert_clean_labels(t)
    bare = tokenize(text, str(minilm / "tokenizer.json"))
    assert bare.strings == t.strings[1:-1]
    for s, (a, b) in zip(bare.strings, bare.offsets, strict=True):
        assert text[a:b].lower() == s.removeprefix("##")


def test_minilm_is_not_truncated_or_padded(minilm):
    text = " ".join(f"word{i % 7}" if i % 2 else "river" for i in range(300))
    tok = load_tokenizer(minilm)
    t = encode(tok, text, add_special_tokens=True)
    assert len(t) > 300
    assert "[PAD]" not in t.strings
    assert len(encode(tok, "short", add_special_tokens=True)) == 3


# --- errors -------------------------------------------------------------------------------------------

NOT_TOKENIZER = b'{"hello": "world"}'
BAD_MODEL = b'{"version": "1.0", "model": {"type": "Nope"}}'

# (case id, files to create under tmp (None = a folder), tokenizer argument, text, fragments of the message)
ERROR_CASES = [
    ("unknown name", {}, "foo", "hi", ["unknown tokenizer 'foo'", "word, bpe"]),
    ("unknown name case", {}, "BPE", "hi", ["unknown tokenizer 'BPE'"]),
    ("missing file", {}, "{tmp}/nope.json", "hi", ["'{tmp}/nope.json'", "does not exist"]),
    ("folder without json", {"empty": None}, "{tmp}/empty", "hi", ["no tokenizer.json", "'{tmp}/empty'"]),
    (
        "a directory",
        {"odd/tokenizer.json": None},
        "{tmp}/odd",
        "hi",
        ["is a directory, not a file", "'{tmp}/odd/tokenizer.json'"],
    ),
    ("not utf-8", {"t.json": b'{"a": "\xff\xfe"}'}, "{tmp}/t.json", "hi", ["'{tmp}/t.json'", "not UTF-8"]),
    ("empty file", {"t.json": b""}, "{tmp}/t.json", "hi", ["'{tmp}/t.json'", "is empty"]),
    ("truncated", {"t.json": "BPE_HALF"}, "{tmp}/t.json", "hi", ["'{tmp}/t.json'", "not valid JSON"]),
    ("corrupt", {"t.json": b'{"model": ]'}, "{tmp}/t.json", "hi", ["'{tmp}/t.json'", "not valid JSON", "line 1"]),
    ("json list", {"t.json": b"[1, 2]"}, "{tmp}/t.json", "hi", ["'{tmp}/t.json'", "not a Hugging Face"]),
    ("json not tokenizer", {"t.json": NOT_TOKENIZER}, "{tmp}/t.json", "hi", ["'{tmp}/t.json'", "not a Hugging"]),
    ("bad model", {"t.json": BAD_MODEL}, "{tmp}/t.json", "hi", ["'{tmp}/t.json'", "not a usable"]),
    ("empty text word", {}, "word", "", ["the text has no tokens", "''"]),
    ("blank text word", {}, "word", " \n\t ", ["the text has no tokens", "' \\n\\t '"]),
    ("blank text bpe", {}, "bpe", "", ["the text has no tokens", "''"]),
]


@pytest.mark.parametrize(
    "files, tokenizer, text, fragments", [c[1:] for c in ERROR_CASES], ids=[c[0] for c in ERROR_CASES]
)
def test_errors(tmp_path, files, tokenizer, text, fragments):
    for rel, content in files.items():
        p = tmp_path / rel
        if content is None:
            p.mkdir(parents=True)
        else:
            p.parent.mkdir(parents=True, exist_ok=True)
            if content == "BPE_HALF":
                content = BPE_PATH.read_bytes()[: BPE_PATH.stat().st_size // 2]
            p.write_bytes(content)
    with pytest.raises(QkvError) as info:
        tokenize(text, tokenizer.format(tmp=tmp_path))
    message = str(info.value)
    assert "\n" not in message
    for fragment in fragments:
        assert fragment.format(tmp=tmp_path) in message


def test_error_empty_text_with_special_tokens(minilm):
    with pytest.raises(QkvError, match="the text has no tokens"):
        tokenize("   ", str(minilm), add_special_tokens=True)


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root can read any file")
def test_error_permission_denied(tmp_path):
    p = tmp_path / "tokenizer.json"
    p.write_bytes(BPE_PATH.read_bytes())
    p.chmod(0)
    with pytest.raises(QkvError, match="cannot read tokenizer file"):
        load_tokenizer(p)


def test_error_text_not_str():
    tok = load_tokenizer(BPE_PATH)
    with pytest.raises(QkvError, match="must be a str, not int"):
        encode(tok, 123, add_special_tokens=False)  # type: ignore[arg-type]
    with pytest.raises(QkvError, match="must be a str, not bytes"):
        tokenize(b"abc")  # type: ignore[arg-type]


def test_import_does_not_load_tokenizers():
    code = "import sys, qkv_cli.text.tokens, qkv_cli.text.samples; print('tokenizers' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# --- sample texts -------------------------------------------------------------------------------------


def test_sample_dir_and_names():
    assert sample_dir() == Path(__file__).resolve().parents[2] / "sample_texts"
    assert set(SAMPLES) <= set(sample_names())
    assert (sample_dir() / "README.md").is_file()


@pytest.mark.parametrize("name", SAMPLES)
def test_samples_tokenize(name):
    text = sample_text(name)
    assert text == sample_text(f"{name}.txt")
    assert len(tokenize(text)) >= 5
    assert len(tokenize(text, "bpe")) >= len(tokenize(text)) * 0.8


def test_sample_shapes():
    assert default_text() == "The animal didn't cross the street because it was too tired."
    assert sample_text().splitlines()[0] == default_text()
    assert 10 <= len(sample_text("sentences").splitlines()) <= 15
    assert len(sample_text("bilingual_en").splitlines()) == len(sample_text("bilingual_fr").splitlines()) == 1
    long = sample_text("long")
    assert len(tokenize(long)) >= 3000
    lines = [line for line in long.splitlines() if line.strip()]
    assert len(set(lines)) == len(lines), "long.txt must not repeat a paragraph"


@pytest.mark.parametrize("name", ["nope", "../pyproject", "README"])
def test_unknown_sample(name):
    with pytest.raises(QkvError, match=f"unknown sample '{name}'.*coreference"):
        sample_text(name)
