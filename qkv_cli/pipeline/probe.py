"""`qkv heads --induction-probe N`: the standard probe for induction heads.

A seeded random sequence of N vocabulary tokens, repeated twice, wrapped in the special tokens the model's own
tokenizer adds ([CLS] ... [SEP] for BERT, <s> for Llama), or after its BOS token (tokenizer_config.json
`bos_token`, e.g. GPT-2's <|endoftext|>) when the tokenizer adds none. In the second copy an induction head
attends from each token to the token after its first occurrence; the first copy has nothing to repeat.
Special tokens and bracketed entries ([unused3], <unk>) are never drawn, and no token is drawn twice when the
vocabulary has N others.
"""

from __future__ import annotations

import re

import numpy as np

from qkv_cli.core import budget
from qkv_cli.core.result import Result
from qkv_cli.errors import QkvError

SPECIAL = re.compile(r"\[.+\]|<.+>|<\|.+\|>")


def wrapping(model) -> tuple[list[int], list[int]]:
    """(prefix, suffix): the special token ids the model's tokenizer puts around a text, or its BOS token."""
    tok = model.tokenizer
    ids, bare = list(model.tokenize("a").ids), list(model.tokenize("a", special=False).ids)
    start = next((k for k in range(len(ids) - len(bare) + 1) if ids[k : k + len(bare)] == bare), None)
    if start is None:  # the text's own tokens differ with the specials: keep the special ids at either end
        specials = special_ids(tok)
        start = next((k for k, i in enumerate(ids) if i not in specials), len(ids))
        end = next((k for k in range(len(ids), start, -1) if ids[k - 1] not in specials), start)
    else:
        end = start + len(bare)
    prefix, suffix = ids[:start], ids[end:]
    if not prefix:
        from qkv_cli.pipeline.chat import specials as named

        bos = named(model).get("bos_token")
        bos_id = tok.token_to_id(bos) if bos else None
        prefix = [] if bos_id is None else [int(bos_id)]
    return prefix, suffix


def special_ids(tok) -> set[int]:
    decoder = getattr(tok, "get_added_tokens_decoder", None)
    return {int(i) for i, t in decoder().items() if getattr(t, "special", True)} if decoder else set()


def candidates(model) -> np.ndarray:  # -> [k] the vocabulary ids the probe may draw
    tok = model.tokenizer
    limit = min(model.config.vocab_size, tok.get_vocab_size())
    specials = special_ids(tok)
    ids = [i for s, i in tok.get_vocab().items() if i < limit and i not in specials and not SPECIAL.fullmatch(s)]
    if not ids:
        raise QkvError(f"{model.name}'s vocabulary has no ordinary tokens to draw an induction probe from")
    return np.array(sorted(ids), dtype=np.int64)


def probe_ids(model, n: int, seed: int = 0) -> np.ndarray:  # -> [prefix + 2 n + suffix] ids
    """The probe's ids: prefix, N seeded random tokens, the same N again, suffix."""
    prefix, suffix = wrapping(model)
    m = 2 * n + len(prefix) + len(suffix)
    if m > model.config.max_positions:
        raise QkvError(f"--induction-probe {n} makes {m} tokens (twice {n}, plus {len(prefix) + len(suffix)} special), "
                       f"more than {model.name} accepts ({model.config.max_positions}): use a smaller N")  # fmt: skip
    pool = np.setdiff1d(candidates(model), prefix + suffix)
    if not pool.size:
        raise QkvError(f"{model.name}'s vocabulary has no ordinary tokens to draw an induction probe from")
    body = np.random.default_rng(seed).choice(pool, size=n, replace=n > pool.size)
    return np.concatenate([np.array(prefix, np.int64), body, body, np.array(suffix, np.int64)])


def run(model, n: int, seed: int = 0, kernel: str = "vectorized", max_memory: int | None = None) -> Result:
    """The forward pass on the probe (a MODEL Result, every layer's attention, no layer detail)."""
    from qkv_cli.models import estimate_bytes
    from qkv_cli.pipeline.checkpoint import HINTS, check_memory
    from qkv_cli.pipeline.generate import _tokens

    if n < 1:
        raise QkvError(f"--induction-probe must be at least 1, got {n}")
    if 2 * n > model.config.max_positions:  # before anything is drawn: N may be huge
        raise QkvError(f"--induction-probe {n} makes at least {2 * n} tokens, more than {model.name} accepts "
                       f"({model.config.max_positions}): use a smaller N")  # fmt: skip
    limit = budget.default_max_memory() if max_memory is None else max_memory
    check_memory(model, estimate_bytes(model.config, 2 * n + 2, model.dtype), limit, HINTS, given=("fewer --layer",))
    ids = probe_ids(model, n, seed)
    return model.forward(ids, layers=[], kernel=kernel, tokens=_tokens(model, [int(i) for i in ids]))
