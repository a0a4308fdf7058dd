"""A Hugging Face `tokenizers.Tokenizer` from a GGUF file's tokenizer metadata, giving the ids transformers gives.

    tok = tokenizer_from_gguf(meta)      # meta: the file's metadata, {"tokenizer.ggml.tokens": [...], ...}
    special_tokens(meta)                 # {"bos_id": 1, "eos_id": 2, "unk_id": 0, "pad_id": None, "add_bos": ...}

transformers (`AutoTokenizer.from_pretrained(folder, gguf_file=name)`, 5.24) is followed step by step: the builder
`tokenizer.ggml.model` names (gguf_builders.py), the split regex `tokenizer.ggml.pre` names, control tokens (type 3)
added as special, user-defined ones (type 4) as plain added tokens, the bos/eos/unk/pad tokens as special, and a
post-processor adding BOS/EOS as `add_bos_token` / `add_eos_token` say (for a "llama" vocabulary BOS by default).
One deliberate difference: where transformers would add a special token that is not in the file's vocabulary
(GPT2Tokenizer's "<|endoftext|>", or a BOS spelled outside the byte alphabet), it mints an id past the model's
embeddings; qkv leaves such a token out, and adds BOS/EOS under the file's own ids.

The metadata is untrusted: every key is checked (type, length, range) and every failure, a panic inside the
`tokenizers` library included, is a one-line QkvError. `tokenizers` is imported inside the functions.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from qkv_cli.errors import QkvError
from qkv_cli.text.gguf_builders import (
    BUILDERS,
    KNOWN_PRE,
    SPLITS,
    builder_name,
    byte_spelling,
    implied_merges,
    model_vocab,
)
from qkv_cli.text.rust import held_stderr

if TYPE_CHECKING:  # pragma: no cover - typing only
    from tokenizers import Tokenizer

__all__ = ["MAX_TOKEN_CHARS", "MAX_VOCAB", "special_tokens", "tokenizer_from_gguf"]

MAX_VOCAB = 2**20  # tokens in a vocabulary (the largest real ones hold about 2**18)
MAX_MERGES = 2**21
MAX_TOKEN_CHARS = 1024  # characters in one token (real ones stay under a few hundred)
MAX_TOTAL_CHARS = 2**26  # characters in all tokens, or in all merges, together
CONTROL, USER_DEFINED = 3, 4  # llama.cpp's token types
_K = "tokenizer.ggml."
_SPECIALS = {"bos": "bos_token_id", "eos": "eos_token_id", "unk": "unknown_token_id", "pad": "padding_token_id"}


@dataclass(frozen=True)
class GgufVocab:
    """The tokenizer metadata of one GGUF file, checked."""

    builder: str  # a key of BUILDERS
    pre: str | None
    tokens: list[str]
    types: np.ndarray | None  # [n] int, or None when the file has no token types
    scores: list[float] | None  # [n], or None
    merges: list[tuple[str, str]] | None
    ids: dict[str, int | None]  # "bos", "eos", "unk", "pad" -> id in the file
    add_bos: bool
    add_eos: bool


def tokenizer_from_gguf(meta: dict) -> Tokenizer:
    """The tokenizer the GGUF metadata describes, with padding and truncation off; QkvError if it is unusable."""
    v = read_vocab(meta)
    with _rust("build the tokenizer"):
        merges = v.merges if v.merges is not None else implied_merges(v.builder, v.tokens, v.scores)
        built = BUILDERS[v.builder](v.tokens, merges)
        tok = built.tokenizer
        _add_tokens(tok, v, built.vocab, built.defaults, built.byte_level)
        if v.pre in SPLITS:
            _split_with(tok, SPLITS[v.pre])
        _add_post_processor(tok, _resolved(v, built.vocab), v)
        tok.no_padding()
        tok.no_truncation()
    return tok


def special_tokens(meta: dict) -> dict:
    """{"bos_id", "eos_id", "unk_id", "pad_id": the id the tokenizer uses for it, or None;
    "add_bos", "add_eos": whether encoding with special tokens adds BOS / EOS (never without the token)}."""
    v = read_vocab(meta)
    ids = _resolved(v, model_vocab(v.builder, v.tokens))
    return {
        **{f"{name}_id": ids[name] for name in _SPECIALS},
        "add_bos": v.add_bos and ids["bos"] is not None,
        "add_eos": v.add_eos and ids["eos"] is not None,
    }


# --- reading the metadata --------------------------------------------------------------------------------------------


def read_vocab(meta: dict) -> GgufVocab:
    """Check the tokenizer keys of `meta` and gather them; QkvError naming the first bad key."""
    if not isinstance(meta, dict):
        raise QkvError(f"GGUF metadata must be a dict of keys, not {type(meta).__name__}")
    model = _string(meta, _K + "model")
    if model is None:
        raise QkvError("the GGUF file has no tokenizer (tokenizer.ggml.model is missing)")
    builder = builder_name(model, _string(meta, "general.architecture"))
    pre = _string(meta, _K + "pre")
    if builder == "gpt2" and pre not in KNOWN_PRE and pre not in (None, ""):
        raise QkvError(
            f"unknown GGUF pre-tokenizer '{pre[:60]}' (tokenizer.ggml.pre): known are {', '.join(sorted(KNOWN_PRE))}"
        )
    tokens = _strings(meta, _K + "tokens", MAX_VOCAB, MAX_TOKEN_CHARS, required=True)
    if not tokens:
        raise QkvError("the GGUF vocabulary is empty (tokenizer.ggml.tokens has no tokens)")
    n = len(tokens)
    types = _numbers(meta, _K + "token_type", n, "iu")
    scores = _numbers(meta, _K + "scores", n, "fiu")
    if scores is not None and np.isnan(scores).any():
        raise QkvError(f"GGUF tokenizer.ggml.scores holds NaN (first at token {int(np.argmax(np.isnan(scores)))})")
    lines = _strings(meta, _K + "merges", MAX_MERGES, 2 * MAX_TOKEN_CHARS + 1)
    return GgufVocab(
        builder=builder,
        pre=pre,
        tokens=tokens,
        types=types,
        scores=None if scores is None else scores.astype(np.float64).tolist(),
        merges=None if lines is None else [_merge(i, line) for i, line in enumerate(lines)],
        ids={name: _token_id(meta, _K + key, n) for name, key in _SPECIALS.items()},
        add_bos=_flag(meta, _K + "add_bos_token", builder != "gpt2"),  # llama.cpp adds BOS to SentencePiece
        add_eos=_flag(meta, _K + "add_eos_token", False),
    )


def _string(meta: dict, key: str) -> str | None:
    value = meta.get(key)
    if value is not None and not isinstance(value, str):
        raise QkvError(f"GGUF {key} must be a string, not {type(value).__name__}")
    if value is not None and len(value) > 256:
        raise QkvError(f"GGUF {key} is {len(value)} characters long (at most 256)")
    return value


def _strings(meta: dict, key: str, limit: int, max_chars: int, required: bool = False) -> list[str] | None:
    values = meta.get(key)
    if values is None:
        if required:
            raise QkvError(f"the GGUF file has no {key}")
        return None
    if not isinstance(values, (list, tuple)):
        raise QkvError(f"GGUF {key} must be a list of strings, not {type(values).__name__}")
    if len(values) > limit:
        raise QkvError(f"GGUF {key} has {len(values)} entries (at most {limit})")
    bad = next((i for i, s in enumerate(values) if type(s) is not str), None)
    if bad is not None:
        raise QkvError(f"GGUF {key}[{bad}] must be a string, not {type(values[bad]).__name__}")
    longest = max(map(len, values), default=0)
    if longest > max_chars:
        i = next(i for i, s in enumerate(values) if len(s) == longest)
        raise QkvError(f"GGUF {key}[{i}] is {longest} characters long (at most {max_chars})")
    if sum(map(len, values)) > MAX_TOTAL_CHARS:
        raise QkvError(f"GGUF {key} holds more than {MAX_TOTAL_CHARS} characters")
    return list(values)


def _numbers(meta: dict, key: str, n: int, kinds: str) -> np.ndarray | None:
    values = meta.get(key)
    if values is None:
        return None
    if not isinstance(values, (np.ndarray, list, tuple)):
        raise QkvError(f"GGUF {key} must be an array of numbers, not {type(values).__name__}")
    try:
        array = np.asarray(values)
    except (ValueError, TypeError):
        array = np.asarray([], dtype=object)
    if array.dtype.kind not in kinds or array.ndim != 1:
        what = "integers" if kinds == "iu" else "numbers"
        raise QkvError(f"GGUF {key} must be a 1-D array of {what}, not {array.ndim}-D of {array.dtype}")
    if len(array) != n:
        raise QkvError(f"GGUF {key} has {len(array)} entries for {n} tokens (one per token expected)")
    return array


def _merge(i: int, line: str) -> tuple[str, str]:
    parts = line.split(" ")
    if len(parts) != 2 or not all(parts):
        raise QkvError(f"GGUF merge {i} ({line[:60]!r}) is not two tokens separated by one space")
    return parts[0], parts[1]


def _token_id(meta: dict, key: str, n: int) -> int | None:
    value = meta.get(key)
    if value is None:
        return None
    if isinstance(value, np.integer):
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise QkvError(f"GGUF {key} must be an integer, not {type(value).__name__}")
    if not 0 <= value < n:
        raise QkvError(f"GGUF {key} is {value}, outside the vocabulary of {n} tokens")
    return value


def _flag(meta: dict, key: str, default: bool) -> bool:
    value = meta.get(key, default)
    if isinstance(value, np.bool_):
        value = bool(value)
    if not isinstance(value, bool):
        raise QkvError(f"GGUF {key} must be true or false, not {type(value).__name__}")
    return value


# --- special tokens and the post-processor ---------------------------------------------------------------------------


def _resolved(v: GgufVocab, vocab: dict[str, int]) -> dict[str, int | None]:
    """The id transformers looks each special token's text up under (a repeated token: its last id), else the file's."""
    return {name: None if i is None else vocab.get(v.tokens[i], i) for name, i in v.ids.items()}


def _add_tokens(tok: Any, v: GgufVocab, vocab: dict[str, int], defaults: tuple[str, ...], byte_level: bool) -> None:
    """Added tokens in transformers' order: the class's defaults, control, user-defined, then bos/eos/unk/pad."""
    from tokenizers import AddedToken

    def special(texts):
        return [AddedToken(t, special=True, normalized=False) for t in dict.fromkeys(texts) if t in vocab]

    tok.add_tokens(special(defaults))
    if v.types is not None:
        control, user = np.flatnonzero(v.types == CONTROL), np.flatnonzero(v.types == USER_DEFINED)
        if byte_level:  # a "control" token spelled outside the byte alphabet is a llama.cpp mislabel: skipped
            alphabet = frozenset(byte_spelling().values())
            control = [i for i in control if alphabet.issuperset(v.tokens[i])]
        tok.add_special_tokens(special(v.tokens[i] for i in control))
        tok.add_tokens([AddedToken(v.tokens[i], special=False, normalized=False) for i in user if v.tokens[i] in vocab])
    tok.add_special_tokens(special(v.tokens[i] for i in v.ids.values() if i is not None))


def _split_with(tok: Any, regex: str) -> None:
    from tokenizers import Regex, pre_tokenizers

    split = pre_tokenizers.Split(Regex(regex), behavior="isolated")
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [split, pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]
    )


def _add_post_processor(tok: Any, ids: dict[str, int | None], v: GgufVocab) -> None:
    """BOS before and EOS after the text, as the file asks (named BOS/EOS where the template syntax cannot name it)."""
    from tokenizers import processors

    used = [n for n, add in (("bos", v.add_bos), ("eos", v.add_eos)) if add and ids[n] is not None]
    text = {n: v.tokens[v.ids[n]] for n in used}
    nameable = {n: t and not t.startswith("$") and not any(c.isspace() or c == ":" for c in t) for n, t in text.items()}
    key = {n: t if nameable[n] else n.upper() for n, t in text.items()}
    first, last = [key[n] for n in used if n == "bos"], [key[n] for n in used if n == "eos"]
    single = [*(f"{k}:0" for k in first), "$A:0", *(f"{k}:0" for k in last)]
    pair = [*single, *(f"{k}:1" for k in first), "$B:1", *(f"{k}:1" for k in last)]
    specials = [{"id": key[n], "ids": [ids[n]], "tokens": [text[n]]} for n in used]
    tok.post_processor = processors.TemplateProcessing(single=single, pair=pair, special_tokens=specials)


@contextlib.contextmanager
def _rust(what: str):
    """Turn any failure inside `tokenizers` into a QkvError, a Rust panic (a BaseException) included."""
    try:
        with held_stderr():  # a panic's own lines (and backtrace) stay off the user's stderr
            yield
    except QkvError:
        raise
    except Exception as exc:
        raise QkvError(f"cannot {what} from the GGUF metadata: {_first_line(exc)}") from None
    except BaseException as exc:
        if type(exc).__name__ != "PanicException":
            raise
        raise QkvError(f"cannot {what} from the GGUF metadata: tokenizers panicked ({_first_line(exc)})") from None


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0][:200] if lines else type(exc).__name__
