"""Cross-attention: queries from the text X, keys and values from a context Y.

Q = X W^q (m x d_k), K = Y W^k and V = Y W^v (n x d_k), so scores, Mask and weights are m x n. Self-attention is
the case Y = X. Y gets its own positions 0..n-1 (it is a separate sequence, as an encoder output is).
A causal mask or a sliding window compares query and key positions of one sequence, so with a context they are
an error rather than a silent guess at an alignment.
"""

from __future__ import annotations

from qkv_cli.errors import QkvError


def check(settings, has_context: bool) -> None:
    """--causal / --window need self-attention."""
    if not has_context:
        return
    if settings.window is not None:
        raise QkvError(
            f"--window {settings.window} needs self-attention: with --context the keys are another "
            "text, so 'the n_c most recent keys' means nothing; drop --window or --context"
        )
    if settings.causal:
        raise QkvError(
            "--causal needs self-attention: with --context the keys are another text, so 'keys "
            "before the query' means nothing; drop --causal or --context"
        )


def get_context(context: str | None, context_file: str | None, text_from_stdin: bool = False) -> str | None:
    """The context text from --context TEXT or --context-file PATH ('-' = stdin); None without either."""
    from qkv_cli.inputs import clean, read_file, read_stdin

    if context is not None and context_file is not None:
        raise QkvError("give either --context or --context-file, not both")
    if context_file is not None:
        if context_file == "-":
            if text_from_stdin:
                raise QkvError("stdin can be read once: give the text or the context (--context-file) another way")
            return clean(read_stdin(), "stdin (--context-file -)")
        return clean(read_file(context_file, "--context-file"), f"--context-file {context_file!r}")
    if context is not None:
        return clean(context, "--context")
    return None
