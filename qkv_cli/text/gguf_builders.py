"""The tokenizer models a GGUF vocabulary describes, built the way transformers builds them (its GGUF loader,
`transformers/integrations/gguf/gguf_tokenizer_mapping.py`, and the classes it hands the vocabulary to).

A builder takes the checked token list, scores and merges and returns the `tokenizers.Tokenizer` before special
tokens and the post-processor are added (`gguf_vocab.py` does that), the vocabulary it looked tokens up in, and the
special tokens the transformers class adds by default. `BUILDERS` is the registry; `builder_name` picks one.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from qkv_cli.errors import QkvError

__all__ = ["BUILDERS", "KNOWN_PRE", "SPLITS", "Built", "builder_name", "merges_from_scores", "model_vocab"]

# --- the split regexes transformers sets for a `tokenizer.ggml.pre` value ------------------------------------------

_LLAMA3 = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_TEKKEN = (
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"
    r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*"
    r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_GPT4O = (
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_QWEN2 = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_QWEN35 = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)

SPLITS = {  # pre -> the split regex, before a ByteLevel step without its own regex (as transformers 5.24)
    **dict.fromkeys(
        ["llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2"], _LLAMA3
    ),
    **dict.fromkeys(["jina-v5-nano", "dbrx", "smaug-bpe"], _LLAMA3),
    "tekken": _TEKKEN,
    **dict.fromkeys(["qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2", "megrez"], _QWEN2),
    "qwen35": _QWEN35,
    **dict.fromkeys(["gpt-4o", "llama4", "kanana2", "talkie", "minimax-m2"], _GPT4O),
}

# llama.cpp's other pre-tokenizer names (src/llama-vocab.cpp). transformers has no split of its own for these and
# keeps GPT-2's byte-level regex, so qkv does too ("smollm", "gpt-2", "default", ...). Other names are refused.
_GPT2_DEFAULT = """default gpt-2 phi-2 smollm deepseek-llm deepseek-coder deepseek-v3 youtu falcon mpt starcoder
jina-es jina-de gigachat jina-v1-en jina-v2-es jina-v2-de jina-v2-code a.x-4.0 mellum mellum2 modern-bert roberta-bpe
jais jais-2 gemma4 granite-embed-multi-311m granite-embed-multi-97m sarvam-moe whitespace refact command-r stablelm2
olmo poro-chat glm4 chatglm-bpe viking codeshell bloom gpt3-finnish exaone exaone4 exaone-moe chameleon minerva-7b
tiny_aya cohere2moe superbpe trillion granite-docling bailingmoe bailingmoe2 llada-moe seed-coder hunyuan
hunyuan-dense joyai-llm kimi-k2 grok-2 afmoe laguna solar-open minicpm5 k2-horizon""".split()
KNOWN_PRE = frozenset(SPLITS) | frozenset(_GPT2_DEFAULT)


@dataclass(frozen=True)
class Built:
    """A builder's result: the tokenizer, the vocabulary it looks tokens up in, and the class's default specials."""

    tokenizer: Any
    vocab: dict[str, int]
    defaults: tuple[str, ...]
    byte_level: bool


def builder_name(model: str, architecture: str | None) -> str:
    """Which builder transformers uses for `tokenizer.ggml.model` (and, for SentencePiece, the architecture)."""
    if model == "gpt2":
        return "gpt2"
    if model == "llama":
        return {"gemma": "gemma", "gemma2": "gemma", "gemma3": "gemma", "phi3": "phi3"}.get(architecture, "llama")
    raise QkvError(
        f"unsupported GGUF tokenizer model '{model}' (tokenizer.ggml.model): qkv reads gpt2 (byte-level BPE) "
        "and llama (SentencePiece)"
    )


@functools.cache
def byte_spelling() -> dict[int, str]:
    """GPT-2's bytes_to_unicode: each byte as a printable character ("Ġ" for a space)."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    table = {b: chr(b) for b in keep}
    for n, b in enumerate(b for b in range(256) if b not in table):
        table[b] = chr(256 + n)
    return table


def _gemma_spelling(token: str) -> str:
    """Gemma files store a token of spaces as spaces ("  "); its tokenizer looks it up as "▁▁"."""
    return "▁" * len(token) if " " in token and not token.strip() else token


def model_vocab(name: str, tokens: list[str]) -> dict[str, int]:
    """token -> id as the builder's model sees it (a repeated token keeps its last id, as a dict does)."""
    if name == "gpt2":
        spelling = byte_spelling()
        alphabet = frozenset(spelling.values())
        return {
            t if alphabet.issuperset(t) else "".join(spelling[b] for b in t.encode("utf-8")): i
            for i, t in enumerate(tokens)
        }
    if name == "gemma":
        return {_gemma_spelling(t): i for i, t in enumerate(tokens)}
    return {t: i for i, t in enumerate(tokens)}


def merges_from_scores(tokens: list[str], scores: list[float]) -> list[tuple[str, str]]:
    """The merges a vocabulary implies when the file lists none (transformers' `generate_merges`, best score first).

    Every way of cutting a token into two tokens of the vocabulary is a merge, ranked by the token's score, then by
    the lengths of its parts; ties keep the vocabulary's order. (transformers also orders each token's merges by
    the ids of their parts before the ranking; the lengths already order them, so that sort changes nothing.)
    """
    from operator import itemgetter

    vocab = {t: i for i, t in enumerate(tokens)}
    merges = []  # (score, len(left), len(right), left, right)
    for piece, score in dict(zip(tokens, scores, strict=True)).items():
        n = len(piece)
        for k in range(1, n):
            left = piece[:k]
            if left in vocab:
                right = piece[k:]
                if right in vocab:
                    merges.append((score, k, n - k, left, right))
    merges.sort(key=itemgetter(0, 1, 2), reverse=True)  # stable: equal keys keep the vocabulary's order
    return [(m[3], m[4]) for m in merges]


def check_merges(merges: list[tuple[str, str]], vocab: dict[str, int]) -> None:
    """A merge must join two tokens of the vocabulary into a third (else the BPE model refuses it)."""
    from operator import add

    lefts = [m[0] for m in merges]
    rights = [m[1] for m in merges]
    known = vocab.__contains__
    if all(map(known, lefts)) and all(map(known, rights)) and all(map(known, map(add, lefts, rights))):
        return
    for n, (left, right) in enumerate(merges):  # name the first bad one
        for part in (left, right, left + right):
            if part not in vocab:
                raise QkvError(f"GGUF merge {n} ('{left} {right}') names '{part[:40]}', which is not in the vocabulary")


# --- the builders ----------------------------------------------------------------------------------------------------


def byte_level_bpe(tokens: list[str], merges: list[tuple[str, str]]) -> Built:
    """GPT-2 style: transformers' GPT2Tokenizer (byte-level pre-tokenizer and decoder, no prefix space)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    vocab = model_vocab("gpt2", tokens)
    check_merges(merges, vocab)
    bpe = models.BPE(
        vocab=vocab, merges=merges, dropout=None, continuing_subword_prefix="", end_of_word_suffix="", fuse_unk=False
    )
    tok = Tokenizer(bpe)
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    return Built(tok, vocab, ("<|endoftext|>",), byte_level=True)


def sentencepiece_bpe(tokens: list[str], merges: list[tuple[str, str]]) -> Built:
    """Llama style: transformers' LlamaTokenizer (byte fallback; "▁" for a space, prepended to the first word only)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    vocab = model_vocab("llama", tokens)
    check_merges(merges, vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=True, byte_fallback=True, dropout=None))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=False)
    tok.decoder = decoders.Sequence(
        [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(content=" ", left=1)]
    )
    return Built(tok, vocab, ("<s>", "</s>", "<unk>"), byte_level=False)


def phi3_bpe(tokens: list[str], merges: list[tuple[str, str]]) -> Built:
    """Phi-3: Llama's, but the "▁" comes from a normalizer, so a text starting with a space gets one more."""
    from tokenizers import normalizers

    built = sentencepiece_bpe(tokens, merges)
    built.tokenizer.normalizer = normalizers.Sequence(
        [normalizers.Prepend(prepend="▁"), normalizers.Replace(pattern=" ", content="▁")]
    )
    built.tokenizer.pre_tokenizer = None
    return built


def gemma_bpe(tokens: list[str], merges: list[tuple[str, str]]) -> Built:
    """Gemma: transformers' GemmaTokenizer (a normalizer writes spaces as "▁"; no prefix space; "<unk>" if unknown)."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers

    vocab = model_vocab("gemma", tokens)
    check_merges(merges, vocab)
    bpe = models.BPE(vocab=vocab, merges=merges, fuse_unk=True, unk_token="<unk>", dropout=None, byte_fallback=True)
    tok = Tokenizer(bpe)
    tok.pre_tokenizer = pre_tokenizers.Split(pattern=" ", behavior="merged_with_previous", invert=False)
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()])
    tok.normalizer = normalizers.Replace(" ", "▁")
    return Built(tok, vocab, ("<bos>", "<eos>", "<unk>", "<pad>", "<mask>"), byte_level=False)


BUILDERS = {"gpt2": byte_level_bpe, "llama": sentencepiece_bpe, "phi3": phi3_bpe, "gemma": gemma_bpe}


def implied_merges(name: str, tokens: list[str], scores: list[float] | None) -> list[tuple[str, str]]:
    """Merges for a file that lists none: from the scores, or for Gemma from the order of the tokens."""
    if name == "gemma":
        respelled = [_gemma_spelling(t) for t in tokens]
        return merges_from_scores(respelled, [-float(i) for i in range(len(respelled))])
    if scores is None:
        raise QkvError("the GGUF vocabulary has neither tokenizer.ggml.merges nor tokenizer.ggml.scores to rank merges")
    return merges_from_scores(tokens, scores)
