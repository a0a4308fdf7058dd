"""A figure's subtitle in words a slide's reader needs: whose weights, which layer and heads, what the mask lets
each query see. The settings line (kernel, dtype, scale ...) stays in the file's metadata (views.console.describe)."""

from __future__ import annotations

from qkv_cli.core.result import Kind, Result
from qkv_cli.views.console import clean


def mask_words(result: Result) -> str:
    """What each query may read, in words: 'causal: each token sees itself and the tokens before it'."""
    if result.is_cross:
        return "cross-attention: the queries (rows) come from one text, the keys (columns) from the other"
    if result.model is not None:
        info = result.model
        causal, window = info.causal, info.window
    else:
        s = result.settings
        causal, window = s.causal or bool(s.window), s.window
        if result.rules is not None and result.rules.custom is not None:
            return "a custom mask (--mask-file): crossed cells are hidden"
    if window:
        return f"sliding window: each token sees its {window} most recent tokens (itself included)"
    if causal:
        return "causal: each token sees itself and the tokens before it"
    return "no mask: each token sees every token"


def layer_words(result: Result) -> str:
    """A checkpoint layer's kind and mask: 'sliding window: each token sees its 3 most recent tokens', plus
    'no position rotation (NoPE)' where the layer has none."""
    words = mask_words(result)
    if result.model is not None and result.model.rope is False:
        words += "; no position rotation (NoPE layer)"
    return words


def heads_words(heads, tau: int) -> str:
    if len(heads) == tau:
        return f"all {tau} heads"
    return f"head {heads[0]}" if len(heads) == 1 else "heads " + ", ".join(map(str, heads))


def subtitle(result: Result, heads) -> str:
    """One layer's figure: 'SmolLM2-135M, layer 29 of 30, all 9 heads, 7 tokens; causal: each token sees ...'."""
    if result.kind == Kind.BAND:
        n_c = result.band.shape[-1]
        return (f"random weights (seed {result.settings.seed}), {heads_words(heads, result.tau)}, "
                f"{len(result.labels)} tokens; sliding window of {n_c}: columns are each query's window slots, "
                "oldest left, itself right")  # fmt: skip
    if result.model is not None:
        info = result.model
        who = f"{clean(info.name)}, layer {info.layer} of {info.n_layers}"
    else:
        who = f"random weights (seed {result.settings.seed}, width {result.settings.d})"
    return f"{who}, {heads_words(heads, result.tau)}, {len(result.labels)} tokens; {layer_words(result)}"


def layers_subtitle(run, heads) -> tuple[str, dict[int, str]]:
    """A layer x head grid: the subtitle, and per layer the words its panels carry when the layers differ
    (sliding and full, other windows); an empty dict when every layer is alike and the subtitle says it once."""
    words = {l: layer_words(r) for l, r in run.layers.items()}
    first = run.first_layer()
    who = f"{clean(run.model.name)}, {heads_words(heads, first.tau)}, {len(first.labels)} tokens"
    if len(set(words.values())) == 1:
        return f"{who}; {next(iter(words.values()))}", {}
    return f"{who}; the layers differ: each panel names its layer's mask", {l: short_kind(r) for l, r in
                                                                            run.layers.items()}  # fmt: skip


def short_kind(result: Result) -> str:
    """A panel title's few words for a layer: 'sliding window of 3', 'full causal', 'no RoPE'."""
    info = result.model
    kind = f"sliding window of {info.window}" if info.window else ("full causal" if info.causal else "full")
    return kind + (", no RoPE" if info.rope is False else "")
