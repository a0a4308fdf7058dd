"""GGUF vocabularies: qkv's tokenizer gives the ids transformers' GGUF loader gives, and hostile metadata is refused.

Reference tests read real files: SmolLM2-135M-Instruct (byte-level BPE, pre "smollm") and tiny files written here
with gguf.GGUFWriter (SentencePiece for the llama, phi3 and gemma2 architectures; byte-level BPE under several
pre-tokenizer names), each loaded by transformers from the file itself.
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from helpers import reference_import, smollm2_gguf

from qkv_cli.errors import QkvError
from qkv_cli.text.gguf_vocab import MAX_VOCAB, _rust, special_tokens, tokenizer_from_gguf
from qkv_cli.text.tokens import encode

SENTENCES = [
    "Hello world",
    "The quick brown fox jumps over the lazy dog.",
    " leading space",
    "   three leading spaces",
    "trailing spaces   ",
    "multiple    spaces   inside",
    "line one\nline two\n\nline four",
    "tabs\tand\ttabs\t\t",
    "\r\nwindows line\r\n",
    "1234567",
    "3.14 and 2.71828",
    "Call 555-0100 or +1 (800) 123-4567.",
    "1,000,000 dollars; 0.5%",
    "def f(x):\n    return x ** 2  # square",
    "for (int i = 0; i < n; ++i) { sum += a[i]; }",
    "if __name__ == '__main__':\n\tmain()",
    '{"key": [1, 2, 3], "other": null}',
    "<html><body class='x'>hi</body></html>",
    "SELECT * FROM users WHERE id = 42;",
    "Café, naïve, résumé, über, São Paulo",
    "Ærøskøbing ligger på Ærø.",
    "Ελληνικά γράμματα",
    "Привет, как дела?",
    "日本語のテキストです。",
    "你好，世界！今天天气很好。",
    "한국어 문장입니다",
    "مرحبا بالعالم",
    "emoji 😀🎉👍🏽 and flags 🇫🇷",
    "family 👨‍👩‍👧‍👦 zwj",
    "math: ∑ x² ≤ ∞, α β γ",
    "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n",
    "<|im_start|>system\nYou are helpful.<|im_end|>",
    "<|endoftext|>",
    "text<|im_end|>text",
    "<|im_start|><|im_start|>",
    "don't won't it's we're they've I'm you'll he'd",
    "DON'T SHOUT",
    "camelCaseWords and snake_case_words",
    "https://example.com/path?query=1&x=y#frag",
    "user@example.com",
    "a",
    "!!!???...",
    "   ",
    "\n",
    "mixed\u00a0no-break\u2009thin spaces",
    "zero\u200bwidth",
]


# --- reading a file with gguf.GGUFReader into the metadata conventions -----------------------------------------------


def read_metadata(gguf, path) -> dict:
    """Scalars as Python values, string arrays as list[str], numeric arrays as 1-D numpy arrays."""
    T = gguf.GGUFValueType
    meta = {}
    for key, field in gguf.GGUFReader(path).fields.items():
        if not field.types or key.startswith("GGUF."):
            continue
        if field.types[0] == T.ARRAY:
            if field.types[-1] == T.STRING:
                meta[key] = [bytes(field.parts[i]).decode("utf-8") for i in field.data]
            else:
                meta[key] = np.concatenate([field.parts[i] for i in field.data]) if field.data else np.zeros(0)
        elif field.types[0] == T.STRING:
            meta[key] = bytes(field.parts[field.data[0]]).decode("utf-8")
        else:
            value = field.parts[field.data[0]][0]
            meta[key] = bool(value) if field.types[0] == T.BOOL else value.item()
    return meta


def hf_tokenizer(path):
    reference_import("torch")
    transformers = reference_import("transformers")
    transformers.logging.set_verbosity_error()
    return transformers.AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)


def assert_same_ids(mine, theirs, texts, n_vocab):
    for text in texts:
        for special in (True, False):
            expected = theirs(text, add_special_tokens=special)["input_ids"]
            got = mine.encode(text, add_special_tokens=special).ids
            assert got == expected, (text, special, got, expected)
            assert all(0 <= i < n_vocab for i in got)


def assert_same_json(mine, theirs, tokens):
    """The whole tokenizer.json is transformers', but for the special tokens it adds that are not in the file."""
    a, b = json.loads(mine.to_str()), json.loads(theirs.backend_tokenizer.to_str())
    b["added_tokens"] = [t for t in b["added_tokens"] if t["content"] in set(tokens)]
    assert a == b


# --- (1) SmolLM2-135M-Instruct --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def smollm2():
    path = smollm2_gguf()
    meta = read_metadata(reference_import("gguf"), path)
    return meta, tokenizer_from_gguf(meta), hf_tokenizer(path)


@pytest.mark.reference
@pytest.mark.parametrize("text", SENTENCES)
def test_smollm2_ids_match_transformers(smollm2, text):
    meta, mine, theirs = smollm2
    assert_same_ids(mine, theirs, [text], len(meta["tokenizer.ggml.tokens"]))


@pytest.mark.reference
@pytest.mark.parametrize("text", SENTENCES)
def test_smollm2_tokens_round_trip(smollm2, text):
    _, mine, theirs = smollm2
    enc = mine.encode(text)
    assert mine.decode(enc.ids, skip_special_tokens=False) == text == theirs.decode(enc.ids)
    starts = [a for a, _ in enc.offsets]
    assert starts == sorted(starts) and enc.offsets[0][0] == 0 and enc.offsets[-1][1] == len(text)
    if text.strip():
        assert encode(mine, text, add_special_tokens=True).ids == tuple(enc.ids)


@pytest.mark.reference
def test_smollm2_special_tokens_match_transformers(smollm2):
    meta, mine, theirs = smollm2
    got = special_tokens(meta)
    assert got == {"bos_id": 1, "eos_id": 2, "unk_id": 0, "pad_id": 2, "add_bos": False, "add_eos": False}
    assert (got["bos_id"], got["eos_id"], got["pad_id"]) == (
        theirs.bos_token_id,
        theirs.eos_token_id,
        theirs.pad_token_id,
    )
    assert mine.encode("<|im_start|>user").ids[0] == 1 and mine.encode("Hi").ids[0] != 1  # special, and no BOS
    assert_same_json(mine, theirs, meta["tokenizer.ggml.tokens"])


# --- (2) tiny files written here --------------------------------------------------------------------------------------

WORDS = "the quick brown fox jumps over lazy dog hello world token attention query key value hi there".split()


def spm_vocab():
    """SentencePiece-style: controls, <unk>, byte tokens <0x00>..<0xFF>, then "▁"-words and their pieces, scored."""
    tokens = ["<unk>", "<s>", "</s>", "<|im_start|>", "<|im_end|>", "<think>", "<pad>"]
    types = [2, 3, 3, 3, 1, 4, 5]
    tokens += [f"<0x{b:02X}>" for b in range(256)]
    types += [6] * 256
    pieces = sorted(
        {("▁" + w)[i:j] for w in WORDS for i in range(len(w) + 1) for j in range(i + 1, min(i + 6, len(w) + 2))}
    )
    tokens += pieces + ["▁the"]  # one token twice: a dict keeps its last id, in transformers and in qkv
    types += [1] * (len(pieces) + 1)
    rng = np.random.default_rng(0)
    scores = np.concatenate([np.zeros(263), -rng.permutation(len(pieces) + 1) - np.float32(0.5)]).astype(np.float32)
    return tokens, types, scores


def write_gguf(gguf, path, arch, model, tokens, types, scores=None, merges=None, pre=None, **ids_and_flags):
    w = gguf.GGUFWriter(str(path), arch)
    w.add_context_length(64)
    w.add_embedding_length(8)
    w.add_block_count(1)
    w.add_feed_forward_length(16)
    w.add_head_count(2)
    w.add_head_count_kv(2)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(10000.0)
    w.add_key_length(4)
    w.add_value_length(4)
    w.add_sliding_window(8)
    w.add_tokenizer_model(model)
    if pre is not None:
        w.add_tokenizer_pre(pre)
    w.add_token_list(tokens)
    w.add_token_types(list(types))
    if scores is not None:
        w.add_token_scores([float(s) for s in scores])
    if merges is not None:
        w.add_token_merges(merges)
    for name, value in ids_and_flags.items():
        getattr(w, f"add_{name}")(value)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return read_metadata(gguf, path)


SPM_TEXTS = [
    "hello world",
    "the quick brown fox jumps over the lazy dog",
    " hello  world ",
    "   the",
    "hi\nthere\tkey",
    "attention query key value",
    "Café 你好 😀",
    "<s>hello</s>",
    "<|im_start|>user\nhi there<|im_end|>",
    "a<think>b<pad>c<unk>",
    "unknown words: zebra xylophone",
]


@pytest.mark.reference
@pytest.mark.parametrize("arch", ["llama", "phi3", "gemma2"])
@pytest.mark.parametrize("flags", [{"add_bos_token": True}, {"add_eos_token": True}, {}, {"add_bos_token": False}])
def test_sentencepiece_file_matches_transformers(tmp_path, arch, flags):
    gguf = reference_import("gguf")
    tokens, types, scores = spm_vocab()
    ids = {"bos_token_id": 1, "eos_token_id": 4, "unk_token_id": 0, "pad_token_id": 6}
    meta = write_gguf(gguf, tmp_path / "spm.gguf", arch, "llama", tokens, types, scores, **ids, **flags)
    theirs = hf_tokenizer(tmp_path / "spm.gguf")
    mine = tokenizer_from_gguf(meta)
    assert_same_ids(mine, theirs, SPM_TEXTS, len(tokens))
    assert_same_json(mine, theirs, tokens)
    got = special_tokens(meta)
    assert (got["bos_id"], got["eos_id"], got["unk_id"]) == (theirs.bos_token_id, theirs.eos_token_id, 0)
    assert got["add_bos"] == flags.get("add_bos_token", True) and got["add_eos"] == flags.get("add_eos_token", False)


@pytest.mark.reference
def test_sentencepiece_file_with_merges_matches_transformers(tmp_path):
    gguf = reference_import("gguf")
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)] + list("▁thelo") + ["▁t", "he", "▁the"]
    types = [2, 3, 3] + [6] * 256 + [1] * 9
    meta = write_gguf(
        gguf,
        tmp_path / "m.gguf",
        "llama",
        "llama",
        tokens,
        types,
        merges=["▁ t", "h e", "▁t he"],
        bos_token_id=1,
        eos_token_id=2,
    )
    assert_same_ids(tokenizer_from_gguf(meta), hf_tokenizer(tmp_path / "m.gguf"), SPM_TEXTS, len(tokens))


def byte_level_vocab():
    """GPT-2 style: the 256 byte characters, merges of a few words, controls, and a BOS spelled outside the bytes."""
    from qkv_cli.text.gguf_builders import byte_spelling

    chars = [byte_spelling()[b] for b in range(256)]
    merges = ["Ġ t", "h e", "Ġt he", "l l", "he ll", "hell o", "Ġ w", "o r", "Ġw or", "l d", "Ġwor ld", "1 2", "12 3"]
    made = [a + b for a, b in (m.split(" ") for m in merges)]
    tokens = ["<|begin▁of▁text|>", "<|im_start|>", "<|im_end|>", "<tool>", *chars, *made]
    return tokens, [3, 3, 3, 4] + [1] * (256 + len(made)), merges


@pytest.mark.reference
@pytest.mark.parametrize("pre", [None, "gpt-2", "smollm", "llama-bpe", "qwen2", "tekken", "gpt-4o", "deepseek-llm"])
@pytest.mark.parametrize("bos", [1, 0])  # 0 is spelled outside the byte alphabet: transformers mints an id for it
def test_byte_level_file_matches_transformers(tmp_path, pre, bos):
    gguf = reference_import("gguf")
    tokens, types, merges = byte_level_vocab()
    meta = write_gguf(
        gguf,
        tmp_path / "b.gguf",
        "llama",
        "gpt2",
        tokens,
        types,
        merges=merges,
        pre=pre,
        bos_token_id=bos,
        eos_token_id=2,
        add_bos_token=True,
    )
    mine, theirs = tokenizer_from_gguf(meta), hf_tokenizer(tmp_path / "b.gguf")
    texts = ["hello world", " the world  123 1234567", "<|im_start|>hello<tool><|im_end|>", "Über 你好 😀\n\n\tx"]
    if bos == 1:
        assert_same_ids(mine, theirs, texts, len(tokens))
        assert_same_json(mine, theirs, tokens)
    else:  # the one difference: qkv adds the file's BOS id where transformers adds one past the vocabulary
        for text in texts:
            expected = theirs(text)["input_ids"]
            assert expected[0] >= len(tokens) and mine.encode(text).ids == [0, *expected[1:]]


# --- plain tests: no reference library --------------------------------------------------------------------------------


def tiny_meta(**changes):
    from qkv_cli.text.gguf_builders import byte_spelling

    chars = [byte_spelling()[b] for b in range(256)]
    meta = {
        "general.architecture": "llama",
        "tokenizer.ggml.model": "gpt2",
        "tokenizer.ggml.pre": "gpt-2",
        "tokenizer.ggml.tokens": ["<|endoftext|>", *chars, "Ġw", "Ġwo"],
        "tokenizer.ggml.token_type": np.array([3] + [1] * 258, dtype=np.int32),
        "tokenizer.ggml.merges": ["Ġ w", "Ġw o"],
        "tokenizer.ggml.bos_token_id": 0,
        "tokenizer.ggml.eos_token_id": 0,
    }
    meta.update(changes)
    return {k: v for k, v in meta.items() if v is not None}


def test_a_tiny_byte_level_vocabulary_encodes_as_built():
    tok = tokenizer_from_gguf(tiny_meta())
    assert tok.encode(" wo<|endoftext|>w").ids == [258, 0, 1 + ord("w")]  # byte b is token 1 + b
    assert special_tokens(tiny_meta(**{"tokenizer.ggml.add_eos_token": True}))["add_eos"] is True
    assert tokenizer_from_gguf(tiny_meta(**{"tokenizer.ggml.add_bos_token": True})).encode("w").ids == [0, 1 + ord("w")]


def test_importing_the_module_leaves_tokenizers_out():
    code = "import sys, qkv_cli.text.gguf_vocab; print('tokenizers' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout == "False\n"


def test_a_rust_panic_becomes_a_qkv_error():
    class PanicException(BaseException):  # what pyo3 raises; not an Exception
        pass

    with pytest.raises(QkvError, match="tokenizers panicked"):
        with _rust("build the tokenizer"):
            raise PanicException("index out of bounds\nbacktrace...")
    with pytest.raises(KeyboardInterrupt):
        with _rust("build the tokenizer"):
            raise KeyboardInterrupt


K = "tokenizer.ggml."
HOSTILE = [
    ({K + "model": None}, "has no tokenizer"),
    ({K + "model": "t5"}, "unsupported GGUF tokenizer model 't5'"),
    ({K + "model": 7}, "tokenizer.ggml.model must be a string"),
    ({K + "pre": "made-up"}, "unknown GGUF pre-tokenizer 'made-up' .*known are .*llama-bpe.*smollm"),
    ({K + "pre": ["qwen2"]}, "tokenizer.ggml.pre must be a string"),
    ({K + "tokens": None}, "has no tokenizer.ggml.tokens"),
    ({K + "tokens": "abc"}, "must be a list of strings, not str"),
    ({K + "tokens": []}, "vocabulary is empty"),
    ({K + "tokens": ["a", b"b"]}, r"tokens\[1\] must be a string, not bytes"),
    ({K + "tokens": ["a"] * (MAX_VOCAB + 1)}, f"has {MAX_VOCAB + 1} entries"),
    ({K + "tokens": ["a", "x" * 5000]}, r"tokens\[1\] is 5000 characters long"),
    ({K + "token_type": np.ones(3, dtype=np.int32)}, "token_type has 3 entries for 259 tokens"),
    ({K + "token_type": np.ones(259, dtype=np.float32)}, "token_type must be a 1-D array of integers"),
    ({K + "token_type": np.ones((259, 1), dtype=np.int32)}, "must be a 1-D array"),
    ({K + "token_type": 3}, "token_type must be an array of numbers, not int"),
    ({K + "scores": np.zeros(5, dtype=np.float32)}, "scores has 5 entries for 259 tokens"),
    ({K + "scores": np.full(259, np.nan, dtype=np.float32)}, "scores holds NaN"),
    ({K + "scores": ["x"] * 259}, "scores must be a 1-D array of numbers"),
    ({K + "merges": ["Ġ w", "Ġw q"]}, r"merge 1 \('Ġw q'\) names 'Ġwq', which is not in the vocabulary"),
    ({K + "merges": ["Ġ w", "Ġw o x"]}, "merge 1 .* is not two tokens separated by one space"),
    ({K + "merges": ["Ġ  w"]}, "merge 0 .* is not two tokens"),
    ({K + "merges": [3]}, r"merges\[0\] must be a string, not int"),
    ({K + "bos_token_id": 259}, "bos_token_id is 259, outside the vocabulary of 259 tokens"),
    ({K + "eos_token_id": -1}, "eos_token_id is -1, outside"),
    ({K + "bos_token_id": "1"}, "bos_token_id must be an integer, not str"),
    ({K + "padding_token_id": True}, "padding_token_id must be an integer, not bool"),
    ({K + "add_bos_token": "yes"}, "add_bos_token must be true or false, not str"),
    ({K + "merges": None}, "neither tokenizer.ggml.merges nor tokenizer.ggml.scores"),
    ({K + "model": "llama", K + "merges": None}, "neither tokenizer.ggml.merges nor tokenizer.ggml.scores"),
    ({"general.architecture": 3}, "general.architecture must be a string"),
]


@pytest.mark.parametrize(("changes", "message"), HOSTILE)
def test_hostile_metadata_is_one_line_qkv_error(changes, message):
    for call in (tokenizer_from_gguf, special_tokens):
        if call is special_tokens and "merge" in message:
            continue  # special_tokens does not build the merges
        with pytest.raises(QkvError, match=message) as info:
            call(tiny_meta(**changes))
        assert "\n" not in str(info.value)


def test_metadata_that_is_not_a_dict_is_refused():
    with pytest.raises(QkvError, match="must be a dict of keys, not list"):
        tokenizer_from_gguf([("tokenizer.ggml.model", "gpt2")])
