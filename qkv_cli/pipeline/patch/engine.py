"""Activation patching (qkv patch): copy one activation of one run into the other and measure what comes back.

    clean run C, corrupted run X (the same number of tokens); denoise: patch C's activation into X (noise: X's
    into C); at the last position, with the metric M of the logits z (pipeline.patch.metric),

        recovery = (M(patched) - M(X)) / (M(C) - M(X))          0: the corrupted run, 1: the clean run

The two runs are made once: the run patched into keeps its residual stream x_0..x_L (x_l enters block l), the
source run keeps what --what needs (pipeline.patch.hooks). A patch at layer l starts from the cached x_l (resid:
from x_{l+1} with one position replaced) and recomputes only layers l..L-1 and the last position's logits.
"""

from __future__ import annotations

import inspect

import numpy as np

from qkv_cli.core import budget
from qkv_cli.errors import QkvError
from qkv_cli.pipeline.patch.hooks import WHAT, Patcher, Recorder, cache_shape, columns
from qkv_cli.pipeline.patch.metric import METRICS, Metric
from qkv_cli.pipeline.patch.names import DIRECTIONS
from qkv_cli.pipeline.patch.result import Patching

HINTS = "fewer --what, --dtype float32, or shorter prompts"


class Runner:
    """A decoder's forward pass in pieces: embed, layers start..L-1 (one with an edit), the last position's logits."""

    def __init__(self, model, m: int, kernel: str = "vectorized"):
        from qkv_cli.models.model import layer_masks

        self.model, self.kernel = model, kernel
        self.fam, self.p, self.c = model.family, model.params, model.config
        self.masks = layer_masks(self.fam, self.c, m, m, model.dtype)
        if "edit" not in inspect.signature(self.fam.block).parameters:
            raise QkvError(f"qkv patch does not reach inside {model.name}'s layers ({self.c.family}): its blocks have "
                           "no intervention points; patching runs on GPT-2 and the RoPE decoders")  # fmt: skip

    def block(self, l: int, x, edit=None):  # [m, d] -> [m, d]
        from qkv_cli.models.model import check_finite

        out, _ = self.fam.block(self.p, self.c, l, x, self.masks[l], self.kernel, edit=edit)
        check_finite(out, l, self.model.name)
        return out

    def logits(self, x):  # [m, d] leaving the last block -> [V]: the last position's next-token scores
        z = self.fam.logits(self.p, self.c, self.fam.final(self.p, self.c, x[-1:]))
        if z is None:
            raise QkvError(f"{self.model.name} has no output head: patching measures the answer's logit")
        return np.asarray(z[0], dtype=np.float64)

    def run(self, ids, recorder: Recorder | None = None):  # -> (hidden [L + 1] of [m, d], logits [V])
        x = self.fam.embed(self.p, self.c, np.asarray(ids, dtype=np.int64))
        hidden = [x]
        for l in range(self.c.n_layers):
            if recorder is not None:
                recorder.layer = l
            x = self.block(l, x, recorder)
            hidden.append(x)
        return hidden, self.logits(x)

    def tail(self, x, start: int):  # x entering block `start` -> the last position's logits [V]
        for l in range(start, self.c.n_layers):
            x = self.block(l, x)
        return self.logits(x)


def check_options(what, metric: str, direction: str, wrong) -> tuple[str, ...]:
    """--what (one or more, in WHAT's order), --metric and --direction, before any text is read."""
    chosen = [w for w in dict.fromkeys(what or ())]
    if not chosen:
        raise QkvError(f"--what: name what to patch, one or more of {', '.join(WHAT)}")
    for w in chosen:
        if w not in WHAT:
            raise QkvError(f"unknown --what {w!r}: choose from {', '.join(WHAT)}")
    if metric not in METRICS:
        raise QkvError(f"unknown --metric {metric!r}: choose one of {', '.join(METRICS)}")
    if direction not in DIRECTIONS:
        raise QkvError(f"unknown --direction {direction!r}: choose denoise (clean into corrupted) or noise")
    if metric == "logit-diff" and wrong is None:
        raise QkvError("--metric logit-diff needs --wrong (the answer's logit minus --wrong's)")
    return tuple(w for w in WHAT if w in chosen)


def one_token(model, text: str, option: str) -> tuple[int, str]:
    """The vocabulary id of `text`, which must be one token of the model's vocabulary."""
    if not isinstance(text, str) or not text:
        raise QkvError(f"{option} must be a token of the vocabulary, such as ' Mary'")
    tokens = model.tokenize(text, special=False)
    if len(tokens.ids) != 1:
        parts = ", ".join(repr(s) for s in tokens.labels)  # repr: control bytes escaped
        raise QkvError(f"{option} {text!r} is {len(tokens.ids)} tokens of {model.name} ({parts}), not one: "
                       "give one token (a leading space is often part of it)")  # fmt: skip
    return int(tokens.ids[0]), tokens.labels[0]


def cache_bytes(config, m: int, what, itemsize: int) -> int:
    """What the two cached runs hold: the patched run's residual stream (and the source's for resid), and per
    layer each --what's arrays of the source run."""
    L, d, tau, G, dk = config.n_layers, config.d, config.n_heads, config.G, config.d_k
    count = (L + 1) * m * d * (2 if "resid" in what else 1)
    count += sum(L * int(np.prod(cache_shape(w, m, tau, G, d, dk))) for w in what if w != "resid")
    return itemsize * count + 8 * 3 * config.vocab_size  # and the logits of both runs (float64)


def needed_bytes(model, m: int, what) -> int:
    """The cache, and one pass's working memory (a layer's activations; its attention weights computed whole)."""
    from qkv_cli.models import estimate_bytes

    return cache_bytes(model.config, m, what, model.dtype.itemsize) + estimate_bytes(model.config, m, model.dtype, 1,
                                                                                     kept_layers=0)  # fmt: skip


def patch(model, clean: str, corrupted: str, answer: str, wrong: str | None = None, what=("resid",),
          metric: str | None = None, direction: str = "denoise", kernel: str = "vectorized",
          max_memory: int | None = None, reuse: bool = True, attention: bool = False) -> Patching:  # fmt: skip
    """Every patch of every --what, as the module docstring says. reuse=False: each patch runs the whole pass from
    the embedding (what bench/patch.py measures the cache against). attention: also keep both runs' attention
    weights (L, tau, m, m) each (the page shows them)."""
    metric = metric or ("logit-diff" if wrong is not None else "prob")
    what = check_options(what, metric, direction, wrong)
    tok_c, tok_x = model.tokenize(clean), model.tokenize(corrupted)
    m_c, m_x = len(tok_c.ids), len(tok_x.ids)
    if m_c != m_x:
        raise QkvError(f"the clean prompt is {m_c} tokens and the corrupted one {m_x}: patching copies position i "
                       "into position i, so give prompts of one length (swap words of one token each)")  # fmt: skip
    c = model.config
    a_id, a_label = one_token(model, answer, "--answer")
    w_id, w_label = (None, None) if wrong is None else one_token(model, wrong, "--wrong")
    limit = budget.default_max_memory() if max_memory is None else max_memory
    from qkv_cli.pipeline.checkpoint import check_memory

    extra = 2 * c.n_layers * c.n_heads * m_c * m_c * model.dtype.itemsize if attention else 0
    check_memory(model, needed_bytes(model, m_c, what) + extra, limit, HINTS, what=f"qkv patch ({m_c} tokens, "
                 f"--what {' '.join(what)})", given=("fewer --what",) if len(what) == 1 else ())  # fmt: skip
    runner = Runner(model, m_c, kernel)
    src_ids, dst_ids = (tok_c.ids, tok_x.ids) if direction == "denoise" else (tok_x.ids, tok_c.ids)
    recorder = Recorder((*what, "pattern") if attention else what, c.n_layers)
    src_hidden, z_src = runner.run(src_ids, recorder)
    if recorder.missing():
        raise QkvError(f"--what {' '.join(recorder.missing())}: {model.name}'s attention ({model.config.family}) has "
                       "no such point to patch; try --what resid attn mlp")  # fmt: skip
    seen = Recorder(("pattern",), c.n_layers) if attention else None
    dst_hidden, z_dst = runner.run(dst_ids, seen)
    weights = None
    if attention:  # (clean, corrupted), each (L, tau, m, m)
        pair = np.stack(recorder.store["pattern"]), np.stack(seen.store["pattern"])
        weights = pair if direction == "denoise" else pair[::-1]
    z_clean, z_corr = (z_src, z_dst) if direction == "denoise" else (z_dst, z_src)
    score = Metric(metric, a_id, w_id, z_clean)
    clean_value, corr_value = score(z_clean), score(z_corr)
    if not abs(clean_value - corr_value) > 1e-12 * max(1.0, abs(clean_value)):
        raise QkvError(f"the clean and corrupted prompts give the same {metric} ({clean_value:.6g}): there is nothing "
                       "to recover; choose prompts whose answers differ")  # fmt: skip
    recovery, raw = {}, {}
    for w in what:
        cols = columns(w, m_c, c.n_heads, c.G)
        raw[w] = np.empty((c.n_layers, cols))
        for l in range(c.n_layers):
            for i in range(cols):
                raw[w][l, i] = score(_patched(runner, w, l, i, dst_hidden, src_hidden, recorder, dst_ids, reuse))
        recovery[w] = (raw[w] - corr_value) / (clean_value - corr_value)
    return Patching(
        what=what, recovery=recovery, metric_values=raw, metric=metric, direction=direction,
        metric_clean=clean_value, metric_corrupted=corr_value, answer=(a_id, a_label),
        wrong=None if w_id is None else (w_id, w_label), clean=clean, corrupted=corrupted,
        labels_clean=tok_c.labels, labels_corrupted=tok_x.labels, model=model.name, n_layers=c.n_layers,
        tau=c.n_heads, G=c.G, attention=weights,
    )  # fmt: skip


def _patched(runner, what, l, i, dst_hidden, src_hidden, recorder, dst_ids, reuse: bool):  # -> logits [V]
    """One patch: index i of `what` at layer l, from the cached x_l (reuse) or from the embedding (not)."""
    if what == "resid":
        if reuse and np.array_equal(dst_hidden[l + 1][i], src_hidden[l + 1][i]):
            return runner.logits(dst_hidden[-1])  # both runs are the same there: the patch changes nothing
        x = np.array(dst_hidden[l + 1] if reuse else _redo(runner, dst_ids, l + 1), order="K")
        x[i] = src_hidden[l + 1][i]
        return runner.tail(x, l + 1)
    x = dst_hidden[l] if reuse else _redo(runner, dst_ids, l)
    x = runner.block(l, x, Patcher(what, i, recorder.store[what][l]))
    return runner.tail(x, l + 1)


def _redo(runner, ids, upto: int):  # the residual stream entering block `upto`, computed from the embedding
    x = runner.fam.embed(runner.p, runner.c, np.asarray(ids, dtype=np.int64))
    for l in range(upto):
        x = runner.block(l, x)
    return x
