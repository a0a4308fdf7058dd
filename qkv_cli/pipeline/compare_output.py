"""qkv compare --format json: its size from the two texts' tokens, before either runs (core.output_size)."""

from __future__ import annotations


def check_compare(req, texts: tuple, models: tuple, fmt: str | None, limit: int) -> None:
    """Refuse a comparison whose JSON (weights_a, weights_b and diff: L x tau x m x m each, every layer kept)
    would exceed `limit` bytes; counted from the texts' tokens alone (stdin read once, then kept)."""
    if fmt != "json":
        return
    from qkv_cli.core.output_size import check_count

    pairs = [(texts[0], models[0] if models else None), (texts[-1], models[-1] if models else None)]
    sizes = [count(req, text, model) for text, model in pairs]
    model = models[0] if models else None
    L = 1 if model is None else model.config.n_layers
    tau = req.settings.tau if model is None else model.config.n_heads
    a, b = sizes
    shape = f"{L} layer{'s' if L != 1 else ''} x {tau} heads x {a:,} and {b:,} tokens of weights_a, weights_b, diff"
    check_count("json", L * tau * (a * a + b * b + min(a, b) ** 2), limit, shape, "shorter texts, or --save-npz FILE")


def count(req, text: str, model) -> int:
    """The tokens the run of `text` reads ('-': stdin's): the model's (in its chat template with --chat), or the
    tokenizer's."""
    from qkv_cli.text.inputs import get_text

    text = get_text(text, None)
    if model is not None:
        from qkv_cli.pipeline.chat import prompt

        return len(prompt(model, text, req.inputs.chat).tokens)
    from qkv_cli.text.tokens import tokenize

    return len(tokenize(text, req.settings.tokenizer))
