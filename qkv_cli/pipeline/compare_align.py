"""Which token positions of two runs are compared: the alignment of A's tokens with B's.

Equal token counts: position i of A with position i of B, every one (a swapped word of one token: the positions
whose ids differ are named). Different counts: the common start (the longest shared prefix of ids) and the common
end (the longest shared suffix, after the prefix) are aligned, the differing middle of each is left out. Two runs
with neither a first nor a last token in common have nothing to align: that is refused.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from qkv_cli.errors import QkvError


@dataclass(frozen=True)
class Alignment:
    """a[k] of A's positions is compared with b[k] of B's (k aligned positions, in order)."""

    a: np.ndarray  # (k,) int positions of A
    b: np.ndarray  # (k,) int positions of B
    m_a: int  # A's token count
    m_b: int  # B's token count
    prefix: int  # the common start: positions 0..prefix-1 of both (equal counts: every position)
    suffix: int  # the common end: the last `suffix` positions of each (0 with equal counts)
    differing: tuple[int, ...] = ()  # equal counts: the aligned positions whose ids differ

    @property
    def by_position(self) -> bool:
        return self.m_a == self.m_b

    @property
    def left_a(self) -> tuple[int, int]:
        """A's positions left out, as [start, stop) (empty with equal counts)."""
        return (self.prefix, self.m_a - self.suffix) if not self.by_position else (0, 0)

    @property
    def left_b(self) -> tuple[int, int]:
        return (self.prefix, self.m_b - self.suffix) if not self.by_position else (0, 0)

    def describe(self, labels_a, labels_b) -> str:
        """One line for the header: which positions were aligned, and what was left out."""
        if self.by_position:
            if not self.differing:
                return f"aligned by position: all {self.m_a} tokens (the same tokens)"
            shown = ", ".join(f"{i} {labels_a[i]!r} -> {labels_b[i]!r}" for i in self.differing[:6])
            more = f" and {len(self.differing) - 6} more" if len(self.differing) > 6 else ""
            return f"aligned by position: all {self.m_a} tokens; tokens differ at {shown}{more}"
        parts = []
        if self.prefix:
            parts.append(f"the common start ({_span(0, self.prefix)})")
        if self.suffix:
            ea, eb = self.m_a - self.suffix, self.m_b - self.suffix
            parts.append(f"{'end' if parts else 'the common end'} (A {_span(ea, self.m_a)} = B {_span(eb, self.m_b)})")
        left = [f"{who} {_span(*span)} {_words(labels, span)}" for who, labels, span in
                (("A", labels_a, self.left_a), ("B", labels_b, self.left_b)) if span[1] > span[0]]  # fmt: skip
        return (f"A has {self.m_a} tokens, B {self.m_b}: aligned {' and '.join(parts)}; "
                f"left out {', '.join(left)}")  # fmt: skip


def _span(start: int, stop: int) -> str:
    return f"{start}" if stop - start == 1 else f"{start}..{stop - 1}"


def _words(labels, span) -> str:
    words = " ".join(str(x) for x in labels[span[0] : span[1]][:6])
    return repr(words + (" ..." if span[1] - span[0] > 6 else ""))


def align(keys_a, keys_b) -> Alignment:
    """The alignment of two token sequences (ids, or the token strings where a tokenizer has no ids)."""
    keys_a, keys_b = list(keys_a), list(keys_b)
    m_a, m_b = len(keys_a), len(keys_b)
    if m_a == m_b:
        every = np.arange(m_a)
        differing = tuple(i for i in range(m_a) if keys_a[i] != keys_b[i])
        return Alignment(every, every, m_a, m_b, m_a, 0, differing)
    shortest = min(m_a, m_b)
    prefix = 0
    while prefix < shortest and keys_a[prefix] == keys_b[prefix]:
        prefix += 1
    suffix = 0
    while suffix < shortest - prefix and keys_a[m_a - 1 - suffix] == keys_b[m_b - 1 - suffix]:
        suffix += 1
    if prefix + suffix == 0:
        raise QkvError(f"A ({m_a} tokens) and B ({m_b}) share neither their first nor their last token: nothing to "
                       "align (give texts of one token count, or with a common start or end)")  # fmt: skip
    a = np.concatenate([np.arange(prefix), np.arange(m_a - suffix, m_a)]).astype(np.int64)
    b = np.concatenate([np.arange(prefix), np.arange(m_b - suffix, m_b)]).astype(np.int64)
    return Alignment(a, b, m_a, m_b, prefix, suffix)
