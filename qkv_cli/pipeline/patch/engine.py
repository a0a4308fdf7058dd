"""Activation patching (qkv patch): copy one activation of one run into the other and measure what comes back.

    clean run C, corrupted run X (position i paired with position i, or as pipeline.patch.pairs pairs prompts of
    two lengths); denoise: patch C's activation into X (noise: X's into C); at the answer position (a decoder's
    last, a masked LM's [MASK], or --position), with the metric M of the logits z (pipeline.patch.metric),

        recovery = (M(patched) - M(X)) / (M(C) - M(X))          0: the corrupted run, 1: the clean run

The two runs are made once: the run patched into keeps its residual stream x_0..x_L (x_l enters block l), the
source run keeps what --what needs (pipeline.patch.hooks). A patch at layer l starts from the cached x_l (resid:
from x_{l+1} with one position replaced) and recomputes only layers l..L-1 and the answer position's logits.
"""

from __future__ import annotations

import inspect

import numpy as np

from qkv_cli.core import budget
from qkv_cli.errors import QkvError
from qkv_cli.pipeline.patch.hooks import WHAT, Patcher, Recorder, cache_shape, columns
from qkv_cli.pipeline.patch.metric import METRICS, of_both_runs
from qkv_cli.pipeline.patch.names import DIRECTIONS
from qkv_cli.pipeline.patch.pairs import pair as pair_positions
from qkv_cli.pipeline.patch.result import Patching

HINTS = "fewer --what, --dtype float32, or shorter prompts"


class Runner:
    """A forward pass in pieces: embed, layers start..L-1 (one with an edit), one position's logits (a decoder's
    next-token scores, an encoder's masked-LM scores)."""

    def __init__(self, model, kernel: str = "vectorized"):
        self.model, self.kernel = model, kernel
        self.fam, self.p, self.c = model.family, model.params, model.config
        self._masks = {}  # each layer's mask by prompt length (prompts of two lengths), made when first needed
        self.causal, self.head = answer_head(model)

    def block(self, l: int, x, edit=None):  # [m, d] -> [m, d]
        from qkv_cli.models.model import check_finite, layer_masks

        m = x.shape[0]
        if m not in self._masks:
            self._masks[m] = layer_masks(self.fam, self.c, m, m, self.model.dtype)
        out, _ = self.fam.block(self.p, self.c, l, x, self._masks[m][l], self.kernel, edit=edit)
        check_finite(out, l, self.model.name)
        return out

    def logits(self, x, at: int = -1):  # [m, d] leaving the last block -> [V]: the scores at position `at`
        row = x[at : at + 1] if at != -1 else x[-1:]
        z = self.head(self.p, self.c, self.fam.final(self.p, self.c, row))
        if z is None:
            raise QkvError(f"{self.model.name} has no output head: patching measures the answer's logit")
        return np.asarray(z[0], dtype=np.float64)

    def run(self, ids, recorder: Recorder | None = None, at: int = -1):  # -> (hidden [L + 1] of [m, d], logits [V])
        x = self.fam.embed(self.p, self.c, np.asarray(ids, dtype=np.int64))
        hidden = [x]
        for l in range(self.c.n_layers):
            if recorder is not None:
                recorder.layer = l
            x = self.block(l, x, recorder)
            hidden.append(x)
        return hidden, self.logits(x, at)

    def tail(self, x, start: int, at: int = -1):  # x entering block `start` -> the logits at position `at` [V]
        for l in range(start, self.c.n_layers):
            x = self.block(l, x)
        return self.logits(x, at)


def answer_head(model):  # -> (causal, head(p, c, h) -> [m, V]): the scores the metric reads
    """A decoder's next-token head, or an encoder's masked-LM head; a model whose blocks have no intervention points,
    or an encoder without that head, is refused."""
    fam, c = model.family, model.config
    if "edit" not in inspect.signature(fam.block).parameters:
        raise QkvError(f"qkv patch does not reach inside {model.name}'s layers ({c.family}): its blocks have "
                       "no intervention points; patching runs on BERT, GPT-2 and the RoPE decoders")  # fmt: skip
    causal = fam.layer_mask(c, 0).is_causal
    head = fam.logits if causal else getattr(fam, "masked_lm", None)
    if not causal and (head is None or head(model.params, c, np.zeros((1, c.d), model.dtype)) is None):
        raise QkvError(f"{model.name} has no masked-LM head (BertForMaskedLM's cls.predictions): patching measures "
                       "the answer's score at the masked position, so give a checkpoint saved with it")  # fmt: skip
    return causal, head


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
          max_memory: int | None = None, reuse: bool = True, attention: bool = False,
          position: int | None = None) -> Patching:  # fmt: skip
    """Every patch of every --what, as the module docstring says. reuse=False: each patch runs the whole pass from
    the embedding (what bench/patch.py measures the cache against). attention: also keep both runs' attention
    weights (L, tau, m, m) each (the page shows them). position: the clean prompt's answer position (default: a
    decoder's last, a masked LM's [MASK]; pipeline.patch.pairs)."""
    metric = metric or ("logit-diff" if wrong is not None else "prob")
    what = check_options(what, metric, direction, wrong)
    runner = Runner(model, kernel)  # refuses a model patching cannot measure, before any text is read
    tok_c, tok_x = model.tokenize(clean), model.tokenize(corrupted)
    pairs = pair_positions(model, tok_c, tok_x, position, runner.causal, what)
    m_c, m_x = len(tok_c.ids), len(tok_x.ids)
    c = model.config
    a_id, a_label = one_token(model, answer, "--answer")
    w_id, w_label = (None, None) if wrong is None else one_token(model, wrong, "--wrong")
    limit = budget.default_max_memory() if max_memory is None else max_memory
    from qkv_cli.pipeline.checkpoint import check_memory

    m = max(m_c, m_x)
    extra = c.n_layers * c.n_heads * (m_c * m_c + m_x * m_x) * model.dtype.itemsize if attention else 0
    check_memory(model, needed_bytes(model, m, what) + extra, limit, HINTS, what=f"qkv patch ({m} tokens, "
                 f"--what {' '.join(what)})", given=("fewer --what",) if len(what) == 1 else ())  # fmt: skip
    src_ids, dst_ids = (tok_c.ids, tok_x.ids) if direction == "denoise" else (tok_x.ids, tok_c.ids)
    ats = (pairs.at_clean, pairs.at_corrupted)  # where each run's metric is read
    src_at, dst_at = ats if direction == "denoise" else ats[::-1]
    recorder = Recorder((*what, "pattern") if attention else what, c.n_layers)
    src_hidden, z_src = runner.run(src_ids, recorder, src_at)
    if recorder.missing():
        raise QkvError(f"--what {' '.join(recorder.missing())}: {model.name}'s attention ({model.config.family}) has "
                       "no such point to patch; try --what resid attn mlp")  # fmt: skip
    seen = Recorder(("pattern",), c.n_layers) if attention else None
    dst_hidden, z_dst = runner.run(dst_ids, seen, dst_at)
    weights = None
    if attention:  # (clean, corrupted), each (L, tau, m, m)
        pair = np.stack(recorder.store["pattern"]), np.stack(seen.store["pattern"])
        weights = pair if direction == "denoise" else pair[::-1]
    z_clean, z_corr = (z_src, z_dst) if direction == "denoise" else (z_dst, z_src)
    score, clean_value, corr_value = of_both_runs(metric, a_id, w_id, z_clean, z_corr, "prompts", "answers differ")
    recovery, raw = {}, {}
    where = (*pairs.source_to_patched(direction), dst_at, pairs.same_length)
    for w in what:
        cols = columns(w, len(pairs.clean), c.n_heads, c.G)
        raw[w] = np.empty((c.n_layers, cols))
        for l in range(c.n_layers):
            for i in range(cols):
                raw[w][l, i] = score(_patched(runner, w, l, i, dst_hidden, src_hidden, recorder, dst_ids, reuse,
                                              where))  # fmt: skip
        recovery[w] = (raw[w] - corr_value) / (clean_value - corr_value)
    return Patching(
        what=what, recovery=recovery, metric_values=raw, metric=metric, direction=direction,
        metric_clean=clean_value, metric_corrupted=corr_value, answer=(a_id, a_label),
        wrong=None if w_id is None else (w_id, w_label), clean=clean, corrupted=corrupted,
        labels_clean=tok_c.labels, labels_corrupted=tok_x.labels, model=model.name, n_layers=c.n_layers,
        tau=c.n_heads, G=c.G, attention=weights, pairs=None if pairs.same_length else pairs.as_list(),
        answer_position=(pairs.at_clean, pairs.at_corrupted),
    )  # fmt: skip


def _patched(runner, what, l, i, dst_hidden, src_hidden, recorder, dst_ids, reuse: bool, where):  # -> logits [V]
    """One patch: index i of `what` at layer l, from the cached x_l (reuse) or from the embedding (not). where:
    the paired positions (source run, run patched into), the answer position of the latter, and whether they are
    every position of one length."""
    src, dst, at, same_length = where
    if what == "resid":
        s, t = src[i], dst[i]
        if reuse and np.array_equal(dst_hidden[l + 1][t], src_hidden[l + 1][s]):
            return runner.logits(dst_hidden[-1], at)  # both runs are the same there: the patch changes nothing
        x = np.array(dst_hidden[l + 1] if reuse else _redo(runner, dst_ids, l + 1), order="K")
        x[t] = src_hidden[l + 1][s]
        return runner.tail(x, l + 1, at)
    x = dst_hidden[l] if reuse else _redo(runner, dst_ids, l)
    x = runner.block(l, x, Patcher(what, i, recorder.store[what][l], None if same_length else (src, dst)))
    return runner.tail(x, l + 1, at)


def _redo(runner, ids, upto: int):  # the residual stream entering block `upto`, computed from the embedding
    x = runner.fam.embed(runner.p, runner.c, np.asarray(ids, dtype=np.int64))
    for l in range(upto):
        x = runner.block(l, x)
    return x
