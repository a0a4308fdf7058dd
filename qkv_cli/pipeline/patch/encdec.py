"""Activation patching of an encoder-decoder (T5, mT5, UMT5, BART, Marian): which source position, which head's
queries, keys or values carry what the decoder writes next.

    clean source S_C, corrupted source S_X (one token count); the same teacher-forced decoder input in both runs:
    decoder_start_token_id, then --target's tokens (no end token); the answer is the next target token, the metric
    read at the decoder's last position; recovery = (M(patched) - M(X)) / (M(C) - M(X)) as for a decoder.

--attention picks the stack and the attention whose activations are patched:

    encoder   resid, attn, mlp: encoder layers x source positions; heads, q, k, v, pattern: the encoder
              self-attention's heads. A patch at encoder layer l recomputes encoder layers l.., the output Y, every
              cross-attention's K = Y W^k and V = Y W^v, and the decoder.
    decoder   resid, attn, mlp: decoder layers x target positions (attn: the causal self-attention's output);
              heads, q, k, v, pattern: the decoder self-attention's heads.
    cross     resid and mlp as for decoder; attn: the cross-attention's output; heads, q, k, v, pattern: the
              cross-attention's heads, Q^[j] = X W_j^q from the decoder's stream, K^[j] = Y W_j^k and V^[j] = Y W_j^v
              read from the source (every source position of head j at once). A patch at decoder layer l recomputes
              decoder layers l.. only: Y and the other layers' K, V are cached.
"""

from __future__ import annotations

import numpy as np

from qkv_cli.core import budget
from qkv_cli.errors import QkvError
from qkv_cli.pipeline.patch.engine import HINTS, check_options, one_token
from qkv_cli.pipeline.patch.hooks import Patcher, Recorder, cache_shape, columns
from qkv_cli.pipeline.patch.metric import of_both_runs
from qkv_cli.pipeline.patch.result import Patching

SIDES = ("encoder", "decoder", "cross")


class Only:
    """Passes one attention's points of a decoder block to `edit` (cross_qkv as qkv ... for the cross-attention),
    and mlp; the other attention's points go through unchanged."""

    def __init__(self, edit, cross: bool):
        self.edit, self.cross = edit, cross

    def __call__(self, point: str, value):
        if point == "mlp" or point.startswith("cross_") == self.cross:
            return self.edit(point.removeprefix("cross_"), value)
        return value[0] if point.endswith("heads") else value


class EncDecRunner:
    """The encoder-decoder's teacher-forced pass in pieces: encoder layers, Y and its K, V, decoder layers, the
    decoder's last position's logits."""

    def __init__(self, model, n: int, m: int, side: str):
        self.model, self.side = model, side
        self.enc_bias, self.dec_bias = model.biases("encoder", n, n), model.biases("decoder", m, m)
        self.mask = model.decoder_mask(m)

    def edit(self, edit):  # the stack's edit: the decoder's wrapped to reach one of its two attentions
        return edit if edit is None or self.side == "encoder" else Only(edit, self.side == "cross")

    def encoder(self, ids, recorder=None, start: int = 0, x=None, edit=None):  # -> hidden [L_enc + 1] of [n, d]
        """The encoder from layer `start` (x entering it; start 0: the embedding), edit at layer `start` only."""
        from qkv_cli.models.layers.encdec import embed

        m = self.model
        x = embed(m.params, m.params.encoder, np.asarray(ids, dtype=np.int64)) if x is None else x
        hidden = [x]
        for l in range(start, m.config.n_layers):
            if recorder is not None:
                recorder.layer = l
            x, _ = m.encoder_block(l, x, self.enc_bias[l], edit=recorder or (edit if l == start else None))
            hidden.append(x)
        return hidden

    def source(self, x_last):  # the encoder's last layer's output -> Y [n, d] and each decoder layer's (K, V)
        Y = self.model.final("encoder", x_last)
        return Y, self.model.cross_kv(Y)

    def decoder(self, x, Y, kv, recorder=None, start: int = 0, edit=None):  # -> hidden [L_dec + 1 - start], logits
        """The decoder from layer `start` (x entering it), edit at layer `start` only."""
        m = self.model
        hidden = [x]
        for l in range(start, m.dec_layers):
            if recorder is not None:
                recorder.layer = l
            x, _, _ = m.decoder_block(l, x, Y, self.mask, self.dec_bias[l], kv[l],
                                      edit=self.edit(recorder or (edit if l == start else None)))  # fmt: skip
            hidden.append(x)
        return hidden, self.logits(x)

    def logits(self, x):  # [m, d] leaving the last decoder layer -> [V]: the last position's next-token scores
        z = self.model.logits(self.model.final("decoder", x[-1:]))
        return np.asarray(z[0], dtype=np.float64)


def decoder_tokens(model, target: str | None):
    """decoder_start_token_id, then --target's tokens without the tokenizer's end token: the answer comes next."""
    from qkv_cli.text.tokens import Tokens, encode

    start = model.start_id
    label = model.tokenizer.id_to_token(start) or str(start)
    empty = Tokens(strings=(), labels=(), offsets=(), ids=())
    t = encode(model.tokenizer, target, add_special_tokens=False) if target else empty
    model.check_decoder([start, *t.ids])
    return (start, *t.ids), (label, *t.labels)


def needed_bytes(model, n: int, m: int, what, side: str) -> int:
    """Both runs' hidden states of both stacks, Y and its K, V, the source run's arrays of each --what, one pass."""
    c, item = model.config, model.dtype.itemsize
    L, tau, dk = (c.n_layers, c.n_heads, c.d_k) if side == "encoder" else (model.dec_layers, model.dec_heads, c.d_k)
    rows, keys = (n, n) if side == "encoder" else (m, n if side == "cross" else m)
    count = 2 * ((c.n_layers + 1) * n * c.d + (model.dec_layers + 1) * m * c.d + 2 * model.dec_layers * n * c.d)
    for w in what:
        shape = cache_shape(w, rows, tau, tau, c.d, dk)
        if w in ("k", "v"):
            shape = (tau, keys, dk)
        elif w == "pattern":
            shape = (tau, rows, keys)
        count += L * int(np.prod(shape)) if w != "resid" else 0
    from qkv_cli.pipeline.encdec.run import estimate

    return item * count + 8 * 3 * c.vocab_size + estimate(model, n, m)


def patch(model, clean: str, corrupted: str, target: str | None, answer: str, wrong: str | None = None,
          what=("resid",), metric: str | None = None, direction: str = "denoise", side: str | None = None,
          max_memory: int | None = None, attention: bool = False) -> Patching:  # fmt: skip
    """Every patch of every --what in one stack and attention (`side`, default cross), as the module says."""
    metric = metric or ("logit-diff" if wrong is not None else "prob")
    what = check_options(what, metric, direction, wrong)
    side = side or "cross"
    if side not in SIDES:
        raise QkvError(f"--attention {side!r} is not valid: use one of {', '.join(SIDES)}")
    tok_c, tok_x = model.tokenize(clean), model.tokenize(corrupted)
    n = len(tok_c.ids)
    if n != len(tok_x.ids):
        raise QkvError(f"the clean source is {n} tokens and the corrupted one {len(tok_x.ids)}: patching copies "
                       "position i into position i, so give sources of one length (swap one-token words)")  # fmt: skip
    model.check_source(tok_c.ids)
    dec_ids, dec_labels = decoder_tokens(model, target)
    m = len(dec_ids)
    a_id, a_label = one_token(model, answer, "--answer")
    w_id, w_label = (None, None) if wrong is None else one_token(model, wrong, "--wrong")
    L, tau = (model.config.n_layers, model.config.n_heads) if side == "encoder" else model.decoder_shape
    rows, keys = (n, n) if side == "encoder" else (m, n if side == "cross" else m)
    from qkv_cli.pipeline.checkpoint import check_memory

    limit = budget.default_max_memory() if max_memory is None else max_memory
    extra = 2 * L * tau * rows * keys * model.dtype.itemsize if attention else 0
    check_memory(model, needed_bytes(model, n, m, what, side) + extra, limit, HINTS, what=f"qkv patch ({n} source "
                 f"tokens, {m} decoder tokens, --what {' '.join(what)})")  # fmt: skip
    runner = EncDecRunner(model, n, m, side)
    src_ids, dst_ids = (tok_c.ids, tok_x.ids) if direction == "denoise" else (tok_x.ids, tok_c.ids)
    keep = (*what, "pattern") if attention else what
    src = _Run(runner, src_ids, dec_ids, Recorder(keep, L))
    dst = _Run(runner, dst_ids, dec_ids, Recorder(("pattern",) if attention else (), L))
    z_clean, z_corr = (src.z, dst.z) if direction == "denoise" else (dst.z, src.z)
    score, clean_value, corr_value = of_both_runs(metric, a_id, w_id, z_clean, z_corr, "sources",
                                                  "translations differ at the answer")  # fmt: skip
    recovery, raw = {}, {}
    for w in what:
        raw[w] = np.empty((L, columns(w, rows, tau, tau)))
        for l, i in np.ndindex(raw[w].shape):
            raw[w][l, i] = score(dst.patched(w, l, i, src))
        recovery[w] = (raw[w] - corr_value) / (clean_value - corr_value)
    weights = None
    if attention:  # (clean, corrupted), each (L, tau, rows, keys)
        pair = np.stack(src.recorder.store["pattern"]), np.stack(dst.recorder.store["pattern"])
        weights = pair if direction == "denoise" else pair[::-1]
    labels = (tok_c.labels, tok_x.labels) if side == "encoder" else (dec_labels, dec_labels)
    return Patching(
        what=what, recovery=recovery, metric_values=raw, metric=metric, direction=direction,
        metric_clean=clean_value, metric_corrupted=corr_value, answer=(a_id, a_label),
        wrong=None if w_id is None else (w_id, w_label), clean=clean, corrupted=corrupted,
        labels_clean=tuple(labels[0]), labels_corrupted=tuple(labels[1]), model=model.name, n_layers=L, tau=tau,
        G=tau, answer_position=(m - 1, m - 1), attention=weights, side=side, target=target or "",
        sources=(tuple(tok_c.labels), tuple(tok_x.labels)), decoder=tuple(dec_labels),
    )  # fmt: skip


class _Run:
    """One run, cached: both stacks' residual streams, Y and its K, V, the logits, the recorder's arrays."""

    def __init__(self, runner: EncDecRunner, ids, dec_ids, recorder: Recorder):
        from qkv_cli.models.layers.encdec import embed

        self.runner, self.recorder, self.ids = runner, recorder, ids
        model, on_encoder = runner.model, runner.side == "encoder"
        self.enc = runner.encoder(ids, recorder if on_encoder else None)
        self.Y, self.kv = runner.source(self.enc[-1])
        self.x0 = embed(model.params, model.params.decoder, np.asarray(dec_ids, dtype=np.int64))
        self.dec, self.z = runner.decoder(self.x0, self.Y, self.kv, None if on_encoder else recorder)

    def patched(self, what: str, l: int, i: int, src: _Run):  # -> logits [V]: index i of `what` at layer l from src
        r = self.runner
        if r.side == "encoder":
            if what == "resid":
                x = np.array(self.enc[l + 1])
                x[i] = src.enc[l + 1][i]
                hidden = r.encoder(None, start=l + 1, x=x)
            else:
                hidden = r.encoder(None, start=l, x=self.enc[l], edit=Patcher(what, i, src.recorder.store[what][l]))
            Y, kv = r.source(hidden[-1])
            return r.decoder(self.x0, Y, kv)[1]
        if what == "resid":
            x = np.array(self.dec[l + 1])
            x[i] = src.dec[l + 1][i]
            return r.decoder(x, self.Y, self.kv, start=l + 1)[1]
        return r.decoder(self.dec[l], self.Y, self.kv, start=l, edit=Patcher(what, i, src.recorder.store[what][l]))[1]
