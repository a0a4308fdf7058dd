"""Which positions of the two prompts a patch pairs, and where the metric is read (the answer position).

One length: position i with position i. Different lengths: as `qkv compare` aligns two texts
(pipeline.compare_align), the common start and the common end of the two prompts' token ids are paired and the
differing middle of each is left out (a word inserted, removed or replaced by one of another length); a patch copies
a position into its partner, and the grids of resid, attn and mlp have one column per pair.

The answer position: --position N (a position of the clean prompt, 0-based), else the clean prompt's one [MASK] (a
masked LM: the encoder sees every position), else a decoder's last position. The corrupted prompt's answer position
is its partner, which must exist: prompts that cannot be paired so are refused, naming both lengths, before any
forward.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from qkv_cli.errors import QkvError
from qkv_cli.pipeline.compare_align import align

MASKS = ("[MASK]", "<mask>")  # the mask token of BERT-style vocabularies (RoBERTa's spelling too)
WHOLE = ("pattern",)  # a head's weights over all keys: position-wise only when both prompts have one length
ROTATED = ("q", "k")  # patched after RoPE: a row carries its position's rotation, so it moves only to its own place


@dataclass(frozen=True)
class Pairs:
    """clean[k] of the clean prompt is paired with corrupted[k] of the corrupted prompt; the metric is read at
    at_clean in the clean run and at at_corrupted in the corrupted run."""

    clean: np.ndarray  # (k,) int positions of the clean prompt
    corrupted: np.ndarray  # (k,) their partners in the corrupted prompt
    m_clean: int
    m_corrupted: int
    at_clean: int
    at_corrupted: int

    @property
    def same_length(self) -> bool:
        return self.m_clean == self.m_corrupted

    def source_to_patched(self, direction: str) -> tuple[np.ndarray, np.ndarray]:
        """(positions read in the source run, positions written in the run patched into), pair by pair."""
        return (self.clean, self.corrupted) if direction == "denoise" else (self.corrupted, self.clean)

    def as_list(self) -> list[list[int]]:
        return [[int(a), int(b)] for a, b in zip(self.clean, self.corrupted, strict=True)]


def mask_id(model) -> int | None:
    """The vocabulary id of the mask token, if the tokenizer has one (it tokenizes to itself, whole)."""
    for text in MASKS:
        tokens = model.tokenize(text, special=False)
        if len(tokens.ids) == 1 and tokens.labels[0] == text:
            return int(tokens.ids[0])
    return None


def pair(model, tok_c, tok_x, position: int | None, causal: bool, what=()) -> Pairs:
    """The pairs and the answer positions of the clean and corrupted prompts' tokens, or the one-line refusal."""
    ids_c, ids_x = [int(i) for i in tok_c.ids], [int(i) for i in tok_x.ids]
    m_c, m_x = len(ids_c), len(ids_x)
    lengths = f"the clean prompt is {m_c} tokens and the corrupted one {m_x}"
    if m_c == m_x:
        clean = corrupted = np.arange(m_c)
    else:
        whole = [w for w in what if w in WHOLE]
        if whole:
            raise QkvError(f"{lengths}: --what {' '.join(whole)} copies a head's weights over every key, which needs "
                           "prompts of one length")  # fmt: skip
        try:
            a = align(ids_c, ids_x)
        except QkvError:
            raise QkvError(f"{lengths}, and they share neither their first nor their last token: patching copies "
                           "a position into its partner, so give prompts of one length or with a common start or "
                           "end") from None  # fmt: skip
        clean, corrupted = a.a, a.b
        moved = [w for w in what if w in ROTATED] if model.config.rope is not None and a.suffix else []
        if moved:
            raise QkvError(f"{lengths}: --what {' '.join(moved)} copies queries or keys after RoPE, which carry their "
                           "position's rotation, and the common end sits at other positions in the two prompts; "
                           "patch resid, attn, mlp, heads or v, or give prompts of one length")  # fmt: skip
    at_c = _answer_position(model, ids_c, tok_c.labels, position, causal)
    partner = {int(a): int(b) for a, b in zip(clean, corrupted, strict=True)}
    if at_c not in partner:
        raise QkvError(f"{lengths}: the answer position {at_c} ({tok_c.labels[at_c]!r}) is in the part where they "
                       "differ and has no partner in the corrupted prompt; the prompts must share the tokens around "
                       "the answer (a common end for a decoder's last position)")  # fmt: skip
    at_x = partner[at_c]
    if position is None and not causal:
        masked = [i for i, t in enumerate(ids_x) if t == ids_c[at_c]]
        if len(masked) == 1 and masked[0] != at_x:
            raise QkvError(f"the clean prompt's {tok_c.labels[at_c]} is at {at_c} and the corrupted prompt's at "
                           f"{masked[0]}, which is not its partner ({at_x}): put the masks in the paired places, or "
                           "give --position N")  # fmt: skip
    return Pairs(clean, corrupted, m_c, m_x, at_c, at_x)


def _answer_position(model, ids, labels, position: int | None, causal: bool) -> int:
    m = len(ids)
    if position is not None:
        if isinstance(position, bool) or not isinstance(position, int | np.integer):
            raise QkvError(f"--position must be a whole number, got {type(position).__name__}")
        if not 0 <= position < m:
            raise QkvError(f"--position {position} is outside the clean prompt's {m} tokens (0..{m - 1})")
        return int(position)
    if causal:
        return m - 1  # a decoder predicts the next token at the last position
    mask = mask_id(model)
    found = [] if mask is None else [i for i, t in enumerate(ids) if t == mask]
    if len(found) == 1:
        return found[0]
    if not found:
        raise QkvError(f"{model.name} is a masked LM: put one [MASK] where the answer goes in the clean prompt, or "
                       "name the answer position with --position N")  # fmt: skip
    shown = ", ".join(str(i) for i in found)
    raise QkvError(f"the clean prompt has {len(found)} {labels[found[0]]} tokens (at {shown}): give --position N to "
                   "name the one whose answer is measured")  # fmt: skip
