"""What --chat's template put around the text, said once per run on stderr (stdout keeps its table or JSON)."""

from __future__ import annotations

import sys

from qkv_cli.views.console import clean

SHOWN = 120  # characters of the template's own text shown before and after TEXT


def shown(text: str) -> str:
    """The template's text as one visible line: newlines as \\n, long runs cut in the middle."""
    text = clean(text.replace("\\", "\\\\").replace("\n", "\\n").replace("\t", "\\t"))
    return text if len(text) <= SHOWN else f"{text[: SHOWN // 2 - 2]} ... {text[-(SHOWN // 2 - 3) :]}"


def describe(prompt) -> str:
    """One line: m, how many tokens the template added before and after TEXT, and what they say."""
    m = len(prompt.tokens)
    head = f"--chat: {clean(prompt.source)} gave m = {m} tokens"
    if not prompt.found:
        return f"{head}; TEXT is not in it verbatim (trimmed, escaped or dropped): its own tokens are not counted"
    n_text = m - prompt.n_before - prompt.n_after
    line = (f"{head}: {prompt.n_before} before TEXT ('{shown(prompt.before)}'), {n_text} of TEXT, "
            f"{prompt.n_after} after ('{shown(prompt.after)}')")  # fmt: skip
    chat = prompt.chat
    if chat is not None and chat.system is None and not chat.no_system:
        line += "; --system TEXT or --no-system replaces any system prompt the template adds"
    return line


def note(result) -> None:
    """The line of describe() on stderr, when the run (a Result, a list of them, or mask grids) used --chat."""
    first = result[0] if isinstance(result, list) and result else result
    prompt = getattr(first, "chat", None)
    if prompt is not None:
        sys.stderr.write(f"qkv: note: {describe(prompt)}\n")
