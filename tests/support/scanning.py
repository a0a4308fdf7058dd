"""Shared by the scan tests: the optional libraries (skip without them, fail under QKV_REQUIRE_SCAN=1, as CI runs),
a tiny checkpoint of tests/tiny.py and small corpora made of its words."""

from __future__ import annotations

# sentences of tests/tiny.py's WORDS (at most 10 tokens: BERT's 12 positions with [CLS] and [SEP])
SENTENCES = [
    "the cat sat on the mat .",
    "a dog ran far and then it slept .",
    "the dog sat , the cat ran !",
    "then it ran far",
    "the cat sat on the mat , the cat sat",
    "a cat and a dog",
    "it slept .",
    "the mat",
    "far , far , far",
    "a dog sat on a cat and it ran",
]


def require(name: str):
    """Import pyarrow or ray: skip without it, fail if QKV_REQUIRE_SCAN=1."""
    from helpers import optional_import

    return optional_import(name, "QKV_REQUIRE_SCAN", "pip install 'qkv-cli[scan]' or '[ray]'")


def corpus_file(folder, lines, name="corpus.txt"):
    path = folder / name
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path
