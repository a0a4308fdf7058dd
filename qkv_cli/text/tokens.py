"""Text -> tokens: the word splitter, the small shipped BPE, or any Hugging Face tokenizer.json.

`tokenizers` is imported inside the functions that need it, so `import qkv_cli.tokens` stays cheap.
Every failure is a `QkvError` whose one-line message names the offending value.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from qkv_cli.errors import QkvError
from qkv_cli.text.rust import held_stderr

if TYPE_CHECKING:  # pragma: no cover - typing only
    from tokenizers import Tokenizer

__all__ = ["BPE_PATH", "TOKENIZER_NAMES", "WORD_PATTERN", "Tokens", "encode", "label_of", "load_tokenizer", "tokenize"]

TOKENIZER_NAMES = ("word", "bpe")
MAX_TOKENIZER_BYTES = 512 * 2**20  # the largest real tokenizer.json files are tens of MB
MAX_LABEL = 200  # a label longer than this is cut (a 100,000-character token would stall every view)
BPE_PATH = Path(__file__).parent / "data" / "bpe_tokenizer.json"

# The `word` tokenizer: split on whitespace, then keep words (with inner apostrophes: "didn't", "it's"),
# numbers with separators ("3.50", "1,000") and single punctuation marks as separate tokens.
WORD_PATTERN = r"\d+(?:[.,]\d+)+|\w+(?:['’]\w+)*|[^\w\s]"

# Visible stand-ins for whitespace inside a label (a label is never empty and never blank).
_VISIBLE = {" ": "␣", "\n": "↵", "\t": "⇥", "\r": "␍"}


@dataclass(frozen=True)
class Tokens:
    """The tokens of one text.

    strings: the raw token strings as the tokenizer gives them ("Ġcat", "##ing", "[CLS]").
    labels:  display labels for tables and plots ("cat", "ing", "[CLS]"); never empty, duplicates allowed.
    offsets: (start, end) character offsets into the text; text[start:end] is what the token covers
             ((0, 0) for special tokens such as [CLS]).
    ids:     vocabulary ids, or None for the `word` tokenizer (it has no vocabulary).
    """

    strings: tuple[str, ...]
    labels: tuple[str, ...]
    offsets: tuple[tuple[int, int], ...]
    ids: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        m = len(self.strings)
        if len(self.labels) != m or len(self.offsets) != m or (self.ids is not None and len(self.ids) != m):
            raise QkvError(
                f"Tokens fields disagree in length: {m} strings, {len(self.labels)} labels, "
                f"{len(self.offsets)} offsets, {'no' if self.ids is None else len(self.ids)} ids"
            )

    def __len__(self) -> int:
        return len(self.strings)


def tokenize(text: str, tokenizer: str = "word", *, add_special_tokens: bool = False) -> Tokens:
    """Split `text` with `tokenizer`: "word", "bpe", or a path to a tokenizer.json (or a folder holding one).

    add_special_tokens adds what the tokenizer's post-processor defines (e.g. [CLS] ... [SEP] for BERT);
    `word` and `bpe` define none, so it changes nothing for them.
    """
    _check_text(text)
    if tokenizer == "word":
        return _split_words(text)
    if tokenizer == "bpe":
        return encode(_load_bpe(), text, add_special_tokens)
    return encode(load_tokenizer(_tokenizer_path(tokenizer)), text, add_special_tokens)


def load_tokenizer(path: str | os.PathLike[str]) -> Tokenizer:
    """Load a Hugging Face tokenizer.json (or a folder containing one) with padding and truncation turned off."""
    p = Path(path).expanduser()
    if p.is_dir():
        folder = p
        p = p / "tokenizer.json"
        if not p.exists():
            raise QkvError(f"no tokenizer.json in folder '{folder}': give a tokenizer.json file or its folder")
    elif not p.exists():
        raise QkvError(f"tokenizer file '{p}' does not exist: give a tokenizer.json file or its folder")
    try:
        stat = p.stat()
    except OSError as exc:
        raise QkvError(f"cannot read tokenizer file '{p}': {exc.strerror or exc}") from None
    return _load_cached(str(p.resolve()), stat.st_mtime_ns, stat.st_size)


def decode(tok: Tokenizer, ids, skip_special_tokens: bool = False) -> str:
    """The text of `ids` under the tokenizer's decoder (a hostile one, e.g. a Replace regex, fails in one line)."""
    try:
        with held_stderr():
            return tok.decode([int(i) for i in ids], skip_special_tokens=skip_special_tokens)
    except BaseException as exc:
        if isinstance(exc, KeyboardInterrupt | SystemExit):
            raise
        raise QkvError(f"the tokenizer's decoder failed on the written tokens: {_first_line(exc)}") from None


def encode(tok: Tokenizer, text: str, add_special_tokens: bool = False) -> Tokens:
    """Encode `text` with an already loaded Tokenizer (model code calls this with add_special_tokens=True)."""
    _check_text(text)
    try:
        with held_stderr():  # a panic's own lines (and backtrace) stay off the user's stderr
            enc = tok.encode(text, add_special_tokens=add_special_tokens)
    except BaseException as exc:  # Rust errors, and panics of a hostile regex (PanicException: a BaseException)
        if isinstance(exc, KeyboardInterrupt | SystemExit):
            raise
        raise QkvError(f"the tokenizer failed on the text {_preview(text)}: {_first_line(exc)}") from None
    strings = tuple(enc.tokens)
    if len(strings) - sum(enc.special_tokens_mask) == 0:
        raise QkvError(f"the text has no tokens: {_preview(text)} is empty or only whitespace")
    byte_level = _is_byte_level(tok)
    offsets = tuple((int(a), int(b)) for a, b in enc.offsets)
    return Tokens(
        strings=strings,
        labels=tuple(_label(s, byte_level, text[a:b]) for s, (a, b) in zip(strings, offsets, strict=True)),
        offsets=offsets,
        ids=tuple(int(i) for i in enc.ids),
    )


def label_of(tok: Tokenizer, token: str) -> str:
    """The display label of one vocabulary entry of `tok` (as `encode` labels it, without the text it covers)."""
    return _label(token, _is_byte_level(tok))


# --- the word tokenizer -------------------------------------------------------------------------------


def _split_words(text: str) -> Tokens:
    pieces = _word_pre_tokenizer().pre_tokenize_str(text)
    if not pieces:
        raise QkvError(f"the text has no tokens: {_preview(text)} is empty or only whitespace")
    strings = tuple(s for s, _ in pieces)
    return Tokens(
        strings=strings,
        labels=strings,
        offsets=tuple((int(a), int(b)) for _, (a, b) in pieces),
        ids=None,
    )


@functools.cache
def _word_pre_tokenizer() -> Any:
    from tokenizers import Regex, pre_tokenizers

    return pre_tokenizers.Sequence(
        [pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Split(Regex(WORD_PATTERN), behavior="isolated")]
    )


# --- loading ------------------------------------------------------------------------------------------


def _tokenizer_path(name: str) -> Path:
    """A path for a tokenizer that is not a built-in name; a plain unknown word gets the 'unknown tokenizer' error."""
    p = Path(name).expanduser()
    if p.exists():
        return p
    looks_like_path = os.sep in name or "/" in name or name.endswith(".json") or name.startswith(("~", "."))
    if not looks_like_path:
        raise QkvError(f"unknown tokenizer '{name}': use word, bpe or a path to a tokenizer.json")
    raise QkvError(f"tokenizer file '{name}' does not exist: use word, bpe or a path to a tokenizer.json")


@functools.cache
def _load_bpe() -> Tokenizer:
    if not BPE_PATH.is_file():
        raise QkvError(f"the shipped BPE tokenizer '{BPE_PATH}' is missing: run python -m qkv_cli.text.data.build_bpe")
    return load_tokenizer(BPE_PATH)


@functools.lru_cache(maxsize=8)
def _load_cached(path: str, mtime_ns: int, size: int) -> Tokenizer:
    """Read and parse one tokenizer.json; the cache key includes mtime and size so an edited file reloads."""
    from tokenizers import Tokenizer

    from qkv_cli.files import read_regular

    raw = read_regular(Path(path), MAX_TOKENIZER_BYTES, "tokenizer file")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise QkvError(f"tokenizer file '{path}' is not UTF-8 text (bad byte at offset {exc.start})") from None
    try:
        with held_stderr():
            tok = Tokenizer.from_str(text)
    except BaseException as exc:  # Rust errors and panics (PanicException is a BaseException): one line each
        if isinstance(exc, KeyboardInterrupt | SystemExit):
            raise
        raise QkvError(_diagnose(path, text, exc)) from None
    tok.no_padding()
    tok.no_truncation()
    return tok


def _diagnose(path: str, text: str, exc: Exception) -> str:
    """One line explaining why `text` did not load as a tokenizer (only computed on failure)."""
    import json

    try:
        data = json.loads(text)
    except json.JSONDecodeError as jexc:
        what = "is empty" if not text.strip() else f"is not valid JSON ({jexc.msg} at line {jexc.lineno}"
        what += "" if not text.strip() else f" column {jexc.colno})"
        return f"tokenizer file '{path}' {what}: expected a Hugging Face tokenizer.json"
    if not isinstance(data, dict) or "model" not in data:
        return f"'{path}' is JSON but not a Hugging Face tokenizer.json (no \"model\" section)"
    return f"'{path}' is not a usable Hugging Face tokenizer.json: {_first_line(exc)}"


# --- labels -------------------------------------------------------------------------------------------


def _is_byte_level(tok: Tokenizer) -> bool:
    """GPT-2 style tokenizers spell bytes as printable characters ("Ġ" is a space); labels must undo that."""
    for part in (tok.decoder, tok.pre_tokenizer):
        if part is not None and "ByteLevel" in type(part).__name__:
            return True
    pre = tok.pre_tokenizer
    if pre is not None and type(pre).__name__ == "Sequence":
        try:
            return b'"ByteLevel"' in pre.__getstate__()
        except Exception:  # pragma: no cover - defensive: older tokenizers without __getstate__
            return False
    return False


@functools.cache
def _byte_decoder() -> dict[str, int]:
    """The inverse of GPT-2's bytes_to_unicode table: printable character -> byte value."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    table = {chr(b): b for b in keep}
    n = 0
    for b in range(256):
        if b not in keep:
            table[chr(256 + n)] = b
            n += 1
    return table


def _label(s: str, byte_level: bool, covered: str = "") -> str:
    """A clean display label: no '##', 'Ġ' or '▁' markers; whitespace shown as visible symbols; never empty.

    `covered` is the text the token's offsets cover: the label of a byte-level token holding only part of a
    multi-byte character ("Ã" for the first byte of "à") is that character.
    """
    if byte_level:
        table = _byte_decoder()
        if all(c in table for c in s):
            try:
                s = bytes(table[c] for c in s).decode("utf-8")
            except UnicodeDecodeError:
                s = covered.strip() or s  # a piece of a multi-byte character
    elif s.startswith("##") and len(s) > 2:
        s = s[2:]
    s = s.replace("▁", " ")
    stripped = s.strip()
    if len(stripped) > MAX_LABEL:
        return stripped[: MAX_LABEL - 1] + "…"
    if stripped:
        return stripped
    return "".join(_VISIBLE.get(c, "␣") for c in s) if s else "∅"


def _check_text(text: object) -> None:
    if not isinstance(text, str):
        raise QkvError(f"the text must be a str, not {type(text).__name__} ({_preview(text)})")


def _preview(text: object, limit: int = 40) -> str:
    if not isinstance(text, str):
        return repr(text)[:limit]
    return repr(text if len(text) <= limit else text[:limit] + "...")


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__
