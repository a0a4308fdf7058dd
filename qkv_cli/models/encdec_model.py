"""A loaded encoder-decoder checkpoint (T5, BART, Marian) and its NumPy forward pass, teacher-forced or writing.

    Y = encode(source ids)                    every layer's encoder self-attention (n x n)
    X = decode(decoder ids, Y)                every layer's decoder self-attention (m x m, causal) and
                                              cross-attention (m x n: Q from X, K and V from Y)
    logits = X E^T * head_scale + bias

The families (families.encdec.t5, bart, marian) only prepare the weights (layers.encdec.Params); the passes are here.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from qkv_cli.core import masks
from qkv_cli.core.masks import MaskSpec
from qkv_cli.core.result import ModelInfo
from qkv_cli.errors import QkvError
from qkv_cli.models.layers.encdec import Attended, embed, multi_head_attention, position_bias, sublayer
from qkv_cli.models.model import Model, check_finite

SIDES = ("encoder", "decoder", "cross")  # --attention: which of the three attentions a view shows


class EncDecPass(NamedTuple):
    """A teacher-forced pass: per layer, each of the three attentions as it was computed."""

    encoder: list[Attended]  # L_enc, weights (tau, n, n)
    decoder: list[Attended]  # L_dec, weights (tau, m, m)
    cross: list[Attended]  # L_dec, weights (tau, m, n)
    encoder_output: np.ndarray  # (n, d): Y, what every cross-attention reads K and V from
    decoder_output: np.ndarray  # (m, d) after the final norm


def check_side(attention: str, model_name: str = "") -> str:
    if attention not in SIDES:
        raise QkvError(f"--attention {attention!r} is not valid: use one of {', '.join(SIDES)}")
    return attention


class EncDecModel(Model):
    """An encoder-decoder checkpoint: config.n_layers / n_heads are the encoder's; the decoder's are options."""

    is_encoder_decoder = True

    @property
    def dec_layers(self) -> int:
        return self.config.encdec.dec_layers

    @property
    def dec_heads(self) -> int:
        return self.config.encdec.dec_heads

    @property
    def decoder_shape(self) -> tuple[int, int]:
        return self.dec_layers, self.dec_heads

    @property
    def start_id(self) -> int:
        return self.config.encdec.start

    def n_layers(self, attention: str) -> int:
        return self.config.n_layers if attention == "encoder" else self.dec_layers

    def n_heads(self, attention: str) -> int:
        return self.config.n_heads if attention == "encoder" else self.dec_heads

    def rules(self, attention: str) -> MaskSpec:
        return MaskSpec(causal=attention == "decoder")

    def info(self, layer: int | None = None, attention: str = "encoder") -> ModelInfo:
        what = {"encoder": "the encoder layer's input (source tokens)", "decoder": "the decoder layer's input "
                "(target tokens)", "cross": "Q: the decoder stream X (target tokens); K, V: the encoder output Y "
                "(source tokens)"}[attention]  # fmt: skip
        return ModelInfo(self.name, self.config.family, self.n_layers(attention), attention == "decoder", layer,
                         f"{attention}_attention", None, what)  # fmt: skip

    def layer_weights(self, index: int, attention: str = "encoder") -> dict:
        from qkv_cli.models.select import check_layer

        l = check_layer(index, self.n_layers(attention))
        p = self.params
        layer = (p.encoder if attention == "encoder" else p.decoder).layers[l]
        return (layer.cross if attention == "cross" else layer.self_attn).per_head()

    def check_ids(self, ids, what: str, limit: int, key: str) -> np.ndarray:
        ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        if ids.size < 1:
            raise QkvError(f"the {what} has no tokens")
        if ids.size > limit:
            raise QkvError(f"the {what} has {ids.size} tokens but {self.name} accepts at most {limit} ({key}): "
                           f"shorten the {what}")  # fmt: skip
        V = self.config.vocab_size
        if ids.min() < 0 or ids.max() >= V:
            raise QkvError(f"{what} token ids must be in 0..{V - 1}, got {int(ids.min())}..{int(ids.max())}")
        return ids

    def check_source(self, ids) -> np.ndarray:
        return self.check_ids(ids, "source", self.config.max_positions, self.config.positions_key)

    def check_decoder(self, ids) -> np.ndarray:
        c = self.config
        return self.check_ids(ids, "target", c.encdec.dec_positions, c.encdec.dec_positions_key)

    def encode(self, ids, change=None):  # [n] -> Y [n, d], per layer Attended
        """The encoder: bidirectional self-attention (a single text: nothing masked)."""
        x = embed(self.params, self.params.encoder, ids)
        parts = []
        for l, bias in enumerate(self.biases("encoder", len(ids), len(ids))):
            x, att = self.encoder_block(l, x, bias, change)
            parts.append(att)
        return self.final("encoder", x), parts

    def biases(self, side: str, m: int, n: int, start: int = 0) -> list:  # per layer: [tau, m, n], or None
        """T5's relative position bias of each layer of one stack (one table shared, UMT5: one per layer); BART and
        Marian have none. Queries at positions start.., keys at 0..n-1."""
        o, stack = self.params.options, self.params.encoder if side == "encoder" else self.params.decoder
        if stack.buckets is None:
            return [None] * len(stack.layers)
        tables = stack.layer_buckets or [stack.buckets]
        out = [position_bias(t, m, n, side == "encoder", o, start) for t in tables]
        return out if stack.layer_buckets else out * len(stack.layers)

    def final(self, side: str, x):  # [m, d] leaving the last layer -> [m, d]: the stack's final norm (T5)
        norm = (self.params.encoder if side == "encoder" else self.params.decoder).final_norm
        return x if norm is None else norm(x)

    def encoder_block(self, l: int, x, bias, change=None, edit=None):  # [n, d] -> [n, d], Attended
        """Encoder layer l: self-attention, then the feed-forward; edit: patching's points (attn, qkv, heads, mlp)."""
        o, layer = self.params.options, self.params.encoder.layers[l]
        x, att = sublayer(x, layer.self_norm, o.pre_norm, lambda h: self._attend(
            h, h, layer.self_attn, bias, None, "encoder", l, change, edit=edit), edit, "attn")  # fmt: skip
        x, _ = sublayer(x, layer.ffn_norm, o.pre_norm, lambda h: (layer.ffn(h), None), edit, "mlp")
        check_finite(x, l, self.name)
        return x, att

    def decoder_block(self, l: int, x, Y, mask, bias, kv=None, cache=None, change=None, edit=None):
        """Decoder layer l: causal self-attention, cross-attention over Y, the feed-forward; [m, d], [n, d] -> [m, d]
        and both Attended. edit: patching's points, the cross-attention's named cross_attn, cross_qkv, cross_heads."""
        o, layer = self.params.options, self.params.decoder.layers[l]
        cross_edit = None if edit is None else (lambda point, value: edit("cross_" + point, value))
        x, a = sublayer(x, layer.self_norm, o.pre_norm, lambda h: self._attend(
            h, h, layer.self_attn, bias, mask, "decoder", l, change, cache=cache, edit=edit), edit, "attn")  # fmt: skip
        x, c = sublayer(x, layer.cross_norm, o.pre_norm, lambda h: self._attend(
            h, Y, layer.cross, None, None, "cross", l, change, kv=kv, edit=cross_edit), cross_edit, "attn")  # fmt: skip
        x, _ = sublayer(x, layer.ffn_norm, o.pre_norm, lambda h: (layer.ffn(h), None), edit, "mlp")
        check_finite(x, l, self.name)
        return x, a, c

    def cross_kv(self, Y) -> list:  # [n, d] -> per decoder layer (K, V) (tau, n, dk): computed once per source
        from qkv_cli.models.layers.encdec import split_heads

        out = []
        for layer in self.params.decoder.layers:
            w = layer.cross
            out.append((split_heads(w.k(Y), w.tau, w.d_k), split_heads(w.v(Y), w.tau, w.d_k)))
        return out

    def decoder_mask(self, m: int, start: int = 0, dtype=None):  # -> [m, start + m]: causal, queries at start..
        return masks.additive(MaskSpec(causal=True), m, start + m, dtype or self.dtype, offset=start)

    def decode(self, ids, Y, kv=None, caches=None, start: int = 0, change=None):  # [m], [n, d] -> [m, d], parts
        """The decoder on ids at positions start..: causal self-attention (over the cache, if any), then
        cross-attention over Y, then the feed-forward; returns the final-normed stream and both attentions."""
        x = embed(self.params, self.params.decoder, ids, start)
        m, total = len(ids), start + len(ids)
        mask = self.decoder_mask(m, start, x.dtype)
        selfs, crosses = [], []
        for l, bias in enumerate(self.biases("decoder", m, total, start)):
            cache = None if caches is None else caches[l]
            pair = None if kv is None else kv[l]
            x, a, c = self.decoder_block(l, x, Y, mask, bias, pair, cache, change)
            selfs.append(a)
            crosses.append(c)
        return self.final("decoder", x), selfs, crosses

    def _attend(self, X, Y, w, bias, mask, attention, layer, change, cache=None, kv=None, edit=None):
        fn = None if change is None else (lambda Q, K, V: change(attention, layer, Q, K, V))
        att = multi_head_attention(X, Y, w, self.params.options.scale, bias, mask, cache, kv, fn, edit)
        return att.output, att

    def teacher_forced(self, source_ids, decoder_ids, change=None) -> EncDecPass:
        """Teacher-forced: the encoder on the source, the decoder on decoder_ids (start token, then the target).
        change(attention, layer, Q, K, V) -> (Q, K, V) alters one attention's matrices (an ablation)."""
        src, dec = self.check_source(source_ids), self.check_decoder(decoder_ids)
        Y, enc = self.encode(src, change)
        x, selfs, crosses = self.decode(dec, Y, change=change)
        return EncDecPass(enc, selfs, crosses, Y, x)

    def logits(self, x):  # [m, d] -> [m, V]
        p = self.params
        h = x * x.dtype.type(p.options.head_scale) if p.options.head_scale != 1 else x
        z = h @ p.head.T  # (m, d) x (d, V) -> (m, V)
        return z + p.head_bias if p.head_bias is not None else z

    def forward(self, ids, layers=None, kernel: str = "vectorized", tokens=None, type_ids=None):
        raise QkvError(f"{self.name} is an encoder-decoder model: give the target with --target, or use qkv generate")

    def layer_output(self, layer: int, x, kernel: str = "vectorized", zero_value: int | None = None):
        raise QkvError(f"{self.name} is an encoder-decoder model: value zeroing is for encoders and decoders alone")

    def generate(self, source_ids, max_new: int, eos=()):  # [n] -> ids [steps], cross [steps, L_dec, tau, n]
        """Greedy writing: the encoder and every layer's cross-attention K, V once; the decoder's self-attention
        keys and values kept in a KV cache, so each new token costs one query row. Stops after an eos token.
        Returns the written ids, each step's probability and each step's cross-attention row per layer."""
        from qkv_cli.core.numerics import softmax
        from qkv_cli.models.cache import LayerCache

        src = self.check_source(source_ids)
        limit = self.config.encdec.dec_positions
        steps = min(int(max_new), limit)
        Y, _ = self.encode(src)
        kv = self.cross_kv(Y)
        caches = [LayerCache(self.dec_heads, steps, self.params.decoder.layers[0].self_attn.d_k, self.dtype)
                  for _ in range(self.dec_layers)]  # fmt: skip
        token, ids, probs, rows = self.start_id, [], [], []
        for t in range(steps):
            x, _, crosses = self.decode(np.array([token]), Y, kv=kv, caches=caches, start=t)
            p = softmax(self.logits(x)[-1].astype(np.float64))
            token = int(np.argmax(p))
            ids.append(token)
            probs.append(float(p[token]))
            rows.append(np.stack([c.weights[:, -1] for c in crosses]))  # (L_dec, tau, n)
            if token in eos:
                break
        return np.array(ids, dtype=np.int64), np.array(probs), np.stack(rows)
