"""`qkv generate`: a decoder writes, one token at a time, through a KV cache; every step's attention is kept.

Step t reads the tokens so far (the prompt, then what it wrote) and writes token prompt_len + t: greedily (the most
probable), or sampled from Softmax(z / T) restricted to the top k, with a seeded generator. The attention rows kept
for step t are those of the query at position prompt_len + t - 1, the one whose output became the scores z.
"""

from __future__ import annotations

import numpy as np

from qkv_cli.core import budget
from qkv_cli.core.numerics import softmax
from qkv_cli.core.result import GenerationResult, Result
from qkv_cli.core.stats import top_indices
from qkv_cli.errors import QkvError
from qkv_cli.text.tokens import decode

TOP = 5


def choose(z, temperature: float, top_k: int, rng) -> int:  # [V] scores -> the next token id
    if temperature <= 0:
        return int(np.argmax(z))
    z = np.asarray(z, dtype=np.float64) / temperature
    if 0 < top_k < z.size:
        kth = np.partition(z, -top_k)[-top_k]
        z = np.where(z >= kth, z, -np.inf)  # only the k most probable stay
    return int(rng.choice(z.size, p=softmax(z)))


def generate(model, prompt, max_new: int = 32, temperature: float = 0.0, top_k: int = 0, seed: int = 0,
             kernel: str = "vectorized", max_memory: int | None = None, eos=None, progress=None,
             on_token=None) -> Result:  # fmt: skip
    """Generate up to max_new tokens after the prompt's tokens (a Tokens of the model's tokenizer).

    on_token(ids): called with the ids written so far after each token is chosen. progress(t, max_new, seconds):
    called after each written token t (0-based) with the time since the prompt was read. A streamed model
    (models.formats.stream) whose layers do not all fit reads the others again every step."""
    from time import perf_counter

    from qkv_cli.models.cache import KVCache, bytes_needed, stale_at, step
    from qkv_cli.pipeline.checkpoint import check_memory

    c = model.config
    P = len(prompt)
    if max_new < 1:
        raise QkvError(f"--max-new-tokens ({max_new}) must be at least 1")
    if P + max_new > c.max_positions:
        raise QkvError(f"the prompt has {P} tokens and --max-new-tokens is {max_new}: {P + max_new} is more than "
                       f"{model.name} accepts ({c.max_positions}, {c.positions_key})")  # fmt: skip
    limit = budget.default_max_memory() if max_memory is None else max_memory
    n_max = P + max_new - 1
    kept = max_new * c.n_layers * c.n_heads * n_max * model.dtype.itemsize
    activations = bytes_needed(c, P + max_new, model.dtype.itemsize) + kept + 4 * P * P * c.n_heads * 8
    hints = "fewer --max-new-tokens, a shorter prompt" + ("" if model.dtype == np.float32 else ", or --dtype float32")
    check_memory(model, activations, limit, hints)
    cache = KVCache(model, P + max_new)
    start = perf_counter()
    out = step(model, np.asarray(prompt.ids), cache, kernel)  # the prompt at once (prefill)
    prefill = perf_counter() - start
    if out.logits is None:
        raise QkvError(f"{model.name} is an encoder ({c.family}): it has no output head to write tokens with")
    eos = set(eos or ())
    rng = np.random.default_rng(seed)
    ids, probs, top_ids, top_probs = [], [], [], []
    rows = np.zeros((max_new, c.n_layers, c.n_heads, n_max), dtype=model.dtype)
    for t in range(max_new):
        z = out.logits[-1]
        p = softmax(np.asarray(z, dtype=np.float64))
        token = choose(z, temperature, top_k, rng)
        best = top_indices(p, TOP)
        ids.append(token)
        if on_token is not None:
            on_token(ids)
        probs.append(p[token])
        top_ids.append(best)
        top_probs.append(p[best])
        for layer, w in enumerate(out.attentions):  # the writing query's row: (tau, n) of this step's last token
            rows[t, layer, :, : w.shape[-1]] = w[:, -1]
        if progress is not None:
            progress(t, max_new, perf_counter() - start)
        if token in eos or t == max_new - 1:
            break
        if cache.length == stale_at(c):  # LongRoPE's switch: every key again with the long factors
            cache = KVCache(model, P + max_new)
            out = step(model, np.asarray(list(prompt.ids) + ids), cache, kernel)
        else:
            out = step(model, [token], cache, kernel)
    steps = len(ids)
    seconds = perf_counter() - start
    tokens = _tokens(model, list(prompt.ids) + ids)
    top_labels = [list(_tokens(model, [int(i) for i in best]).labels) for best in top_ids]
    written = rows[:steps, :, :, : P + steps - 1]
    sinks = None
    if getattr(c.attention, "sinks", False):  # gpt-oss: what each row's sink took, 1 - its sum (zeros past it)
        sinks = (1 - written.sum(axis=-1, dtype=np.float64)).astype(written.dtype)
    return GenerationResult(tokens=tokens, kernel=kernel, model=model.info(), prompt_len=P,
                  ids=np.asarray(tokens.ids), step_ids=np.asarray(ids), step_probs=np.asarray(probs),
                  step_top_ids=np.stack(top_ids), step_top_probs=np.stack(top_probs), step_top_labels=top_labels,
                  step_attentions=written, step_sinks=sinks, cache_bytes=cache.nbytes,
                  timing={"prefill_seconds": prefill, "seconds": seconds,
                          "seconds_per_token": (seconds - prefill) / max(1, steps - 1) if steps > 1 else prefill},
                  text=decode(model.tokenizer, ids, skip_special_tokens=False))  # fmt: skip


def _tokens(model, ids):
    """Tokens for ids: the tokenizer's strings, and labels as `run` shows them."""
    from qkv_cli.text.tokens import Tokens, label_of

    tok = model.tokenizer
    strings = tuple(tok.id_to_token(i) or f"<{i}>" for i in ids)
    labels = tuple(label_of(tok, s) for s in strings)
    return Tokens(strings=strings, labels=labels, offsets=((0, 0),) * len(ids), ids=tuple(int(i) for i in ids))
