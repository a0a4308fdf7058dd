"""A loaded checkpoint and its NumPy forward pass, with every layer's attention kept for inspection.

    x_0 = embed(ids);  for each layer l: x_{l+1}, attended_l = block(l, x_l, Mask_l);  last = final(x_L)

The family module (models.families.registry) supplies embed, block, final and each layer's mask; everything else here is
shared. The forward returns a core.result.Result of kind MODEL whose `layers` hold a LAYER Result for each
layer asked for (its Q, K, V, scores, mask, weights ... as the export schema names them).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from qkv_cli.core import masks
from qkv_cli.core.numerics import scaled_scores
from qkv_cli.core.result import LayerResult, ModelInfo, ModelResult, Result
from qkv_cli.errors import QkvError
from qkv_cli.models.families.registry import family_for
from qkv_cli.models.formats.config import ModelConfig, Param
from qkv_cli.models.layers.attention import sink_share
from qkv_cli.models.layers.moe import stacked
from qkv_cli.models.select import check_head, check_layer, rows_of, select_layers, select_rows

SCRATCH_ROWS = 2 * 128  # a blocked layer's scratch: two threads' row blocks (core.vectorized.MAX_BLOCK_ROWS rows each)


def estimate_bytes(config: ModelConfig, m: int, dtype="float32", detailed_layers: int = 0,
                   kept_layers: int | None = None, rows: int | None = None,
                   heads: int | None = None) -> int:  # fmt: skip
    """Memory a forward pass of m tokens holds beyond the weights: the kept layers' attention (every layer's when
    kept_layers is None; `rows` query rows of each, every row when None), the hidden states, one layer's
    activations (a layer whose rows are not all kept works a block of rows at a time), and per detailed layer its
    Q, K, V, scores, weights and outputs. heads: how many heads the kept attention holds (None: every head; fewer:
    each kept layer's weights are computed whole, then those heads copied out)."""
    item = np.dtype(dtype).itemsize
    L, tau, d, dk = config.n_layers, config.n_heads, config.d, config.d_k
    kept = L if kept_layers is None else kept_layers
    R = m if rows is None else min(rows, m)
    qkv = (tau + 2 * config.G) * dk
    scratch = 2 * tau * m * (m if rows is None and kept == L else min(m, SCRATCH_ROWS))
    if heads is not None and heads < tau:
        scratch += tau * R * m
    base = (
        kept * (tau if heads is None else heads) * R * m
        + (L + 1) * m * d
        + m * max(config.d_ff, qkv) * 2
        + scratch
        + 4 * m * d
    )
    per_layer = 2 * tau * R * m + m * (qkv + 2 * tau * dk) + 2 * m * d
    return item * (base + detailed_layers * per_layer)


class Model:
    """A checkpoint loaded for the NumPy forward pass: config, prepared weights, tokenizer (loaded on first use)."""

    is_encoder_decoder = False  # models.encdec_model.EncDecModel: an encoder, a decoder and cross-attention

    def __init__(self, config: ModelConfig, path: Path, dtype, params, name: str = "", tokenizer=None):
        """tokenizer: None (the folder's tokenizer.json) or a function that builds it (a GGUF file's vocabulary)."""
        self.config = config
        self.path = Path(path)
        self.dtype = np.dtype(dtype)
        self.params = params
        self.name = name or config.name or self.path.name
        self.family = family_for(config.family)
        self.metadata: dict = {}  # a GGUF file's metadata (chat template, special tokens ...)
        self._weights_bytes = 0  # what the weights take in memory, once cast (a streamed model: computed)
        self.fixed_bytes = 0  # a streamed model's weights outside its layers and head (the final norm)
        self._make_tokenizer = tokenizer
        self._tokenizer = None

    @property
    def decoder_shape(
        self,
    ) -> tuple[int, int]:  # (layers, heads) of the stack that writes: an encoder-decoder's decoder
        return self.config.n_layers, self.config.n_heads

    def __repr__(self) -> str:
        c = self.config
        return f"Model({self.name!r}, {c.family}, L={c.n_layers}, tau={c.n_heads}, d={c.d}, dtype={self.dtype.name})"

    @property
    def weights_bytes(self) -> int:
        """What the weights hold at most during a pass: all of them, or for a streamed model (models.formats.stream) the
        resident layers, the two being read and the head as the budget keeps it."""
        from qkv_cli.models.formats.stream import held_bytes, streamed

        return held_bytes(self.params, self.fixed_bytes) if streamed(self.params) else self._weights_bytes

    @weights_bytes.setter
    def weights_bytes(self, value: int) -> None:
        self._weights_bytes = int(value)

    def fit_weights(self, spare: int) -> None:
        """Let the weights of a streamed model hold at most `spare` bytes (as many layers resident as fit)."""
        from qkv_cli.models.formats.stream import fit, streamed

        if streamed(self.params):
            fit(self.params, self.fixed_bytes, spare)

    @property
    def tokenizer(self):
        if self._tokenizer is None and self._make_tokenizer is not None:
            self._tokenizer = self._make_tokenizer()
        if self._tokenizer is None:
            from qkv_cli.text.tokens import load_tokenizer

            tok_path = self.path / "tokenizer.json"
            if not tok_path.is_file():
                raise QkvError(f"no tokenizer.json in '{self.path}': qkv needs the model's own tokenizer.json")
            self._tokenizer = load_tokenizer(tok_path)
        return self._tokenizer

    def tokenize(self, text: str, special: bool = True):
        """The model's own tokens for `text`, with its special tokens ([CLS] ... [SEP] for BERT) unless special is
        False (a chat template writes them itself)."""
        from qkv_cli.text.tokens import encode

        tokens = encode(self.tokenizer, text, add_special_tokens=special)
        self.check_length(len(tokens))
        return tokens

    def check_length(self, m: int) -> None:
        limit = self.config.max_positions
        if m > limit:
            key = self.config.positions_key
            raise QkvError(f"the text has {m} tokens but {self.name} accepts at most {limit} ({key}): shorten the text")
        if m < 1:
            raise QkvError("the text has no tokens")

    def info(self, layer: int | None = None) -> ModelInfo:
        c, fam = self.config, self.family
        if layer is None:
            return ModelInfo(self.name, c.family, c.n_layers, fam.layer_mask(c, 0).is_causal,
                             attention_input=fam.ATTENTION_INPUT)  # fmt: skip
        spec = fam.layer_mask(c, layer)
        rope = None if c.rope is None else layer not in c.rope.no_rope
        return ModelInfo(self.name, c.family, c.n_layers, spec.is_causal, layer, fam.layer_type(c, layer), spec.window,
                         fam.ATTENTION_INPUT, rope)  # fmt: skip

    def parameters(self) -> list[Param]:
        return self.family.parameter_table(self.config)

    def layer_weights(self, index: int) -> dict[str, np.ndarray]:
        """Wq, Wk, Wv (tau or G, d, d_k), bq, bk, bv, Wo (tau d_k, d), bo of one layer (views; None: no bias)."""
        return self.params.blocks[check_layer(index, self.config.n_layers)].attn.per_head()

    def layer_output(self, layer: int, x, kernel: str = "vectorized", zero_value: int | None = None):  # -> [m, d]
        """Layer `layer` rerun on its input x (hidden_states[layer]); with zero_value j, key j's value vector is
        zero in every head (value zeroing). Returns the layer's output and its attention weights."""
        c, fam = self.config, self.family
        l = check_layer(layer, c.n_layers)
        m = x.shape[0]
        mask = masks.additive(fam.layer_mask(c, l), m, m, self.dtype)

        def zeroed(V):
            V = V.copy()
            V[:, zero_value] = 0
            return V

        out, parts = fam.block(self.params, c, l, x, mask, kernel, values=None if zero_value is None else zeroed)
        return out, parts.weights

    def run(self, text: str, layers=None, kernel: str = "vectorized") -> Result:
        """Tokenize `text` and run the forward pass; `layers` chooses which layers keep their full detail."""
        tokens = self.tokenize(text)
        return self.forward(tokens.ids, layers=layers, kernel=kernel, tokens=tokens)

    def forward(self, ids, layers=None, kernel: str = "vectorized", tokens=None, type_ids=None, keep=None,
                rows=None, heads=None, on_layer=None) -> Result:  # fmt: skip
        """The forward pass on vocabulary ids (m,).

        layers: None (no details, the fastest), "all", or layer indices (0-based; -1 the last) that keep a LAYER
        Result. keep: the layers whose attention weights `attentions` holds (None: every layer; the others run
        through a kernel that holds one block of rows at a time). rows: a slice (or "A:B") of query positions
        whose weights are kept (None: all). heads: the heads `attentions` keeps (None: all; a layer's detail keeps
        every head). kernel: a core.kernels name. on_layer(l, LayerResult): called as each detailed layer is
        made; then only the first detailed layer stays in `layers` (an output written layer by layer)."""
        from qkv_cli.core.kernels import get_kernel

        get_kernel(kernel)
        c = self.config
        ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        m = ids.size
        self.check_length(m)
        if ids.min() < 0 or ids.max() >= c.vocab_size:
            raise QkvError(f"token ids must be in 0..{c.vocab_size - 1} ({self.name} embeds {c.vocab_size:,} tokens: "
                           f"vocab_size), got {int(ids.min())}..{int(ids.max())}")  # fmt: skip
        if tokens is None:
            from qkv_cli.text.tokens import Tokens

            labels = tuple(str(i) for i in ids)
            tokens = Tokens(strings=labels, labels=labels, offsets=((0, 0),) * m, ids=tuple(int(i) for i in ids))
        detail = set(select_layers(layers, c.n_layers))
        kept = list(range(c.n_layers)) if keep is None else select_layers(keep, c.n_layers)
        span = select_rows(rows, m)
        r0, r1 = span or (0, m)
        fam, p, dt = self.family, self.params, self.dtype
        x = fam.embed(p, c, ids, 0, type_ids) if type_ids is not None else fam.embed(p, c, ids)
        hidden = stack_like(x, c.n_layers + 1)  # laid out like x (column-major for the decoders), so copies are fast
        chosen = None if heads is None else [check_head(j, c.n_heads) for j in heads]
        tau_kept = c.n_heads if chosen is None else len(chosen)
        attentions = np.zeros((len(kept), tau_kept, r1 - r0, m), dtype=dt)  # each kept layer's kernel writes its slot
        slot = {l: i for i, l in enumerate(kept)}
        hidden[0] = x
        details, routing = {}, {}  # routing: a MoE layer's chosen experts (models.layers.moe.Routing)
        for l, mask in enumerate(layer_masks(fam, c, m, m, dt)):
            if l in slot:
                into, at = (attentions[slot[l]] if chosen is None else None), span
            elif l in detail:
                into, at = None, span
            else:  # nothing kept: one block of rows at a time (small texts: one pass)
                into, at = np.zeros((c.n_heads, 0, m), dtype=dt), (0, 0)
            x, parts = fam.block(p, c, l, x, mask, kernel, into=into, rows=at)
            if l in slot and chosen is not None:  # the layer's weights (tau, rows, m): the kept heads copied out
                attentions[slot[l]] = parts.weights[chosen]
            check_finite(x, l, self.name)
            hidden[l + 1] = x
            if getattr(parts, "routing", None) is not None:
                routing[l] = parts.routing
            if l in detail:
                made = self._layer_result(l, parts, mask, fam.layer_mask(c, l), tokens, kernel, span)
                if on_layer is None or not details:
                    details[l] = made
                if on_layer is not None:
                    on_layer(l, made)
        hidden[-1] = fam.final(p, c, x)
        return ModelResult(
            sinks=sink_share(attentions) if getattr(c.attention, "sinks", False) else None,
            tokens=tokens, kernel=kernel, model=self.info(), layers=details, attentions=attentions,
            ids=ids, hidden_states=hidden, last_hidden_state=hidden[-1],
            layer_types=tuple(fam.layer_type(c, l) for l in range(c.n_layers)),
            layer_rules=tuple(fam.layer_mask(c, l) for l in range(c.n_layers)),
            attention_layers=None if keep is None else tuple(kept),
            attention_heads=None if chosen is None else tuple(chosen),
            rows=None if span is None else np.arange(r0, r1), **stacked(routing, c.n_layers),
        )  # fmt: skip

    def _layer_result(self, l: int, parts, mask, spec, tokens, kernel, span=None) -> Result:
        """Layer l's matrices; with span (r0, r1) the queries' rows r0..r1-1 only (K, V: every key)."""
        hooks = self.family.hooks(self.config, l)
        scale, softcap = hooks.scale, hooks.softcap
        w = self.layer_weights(l)
        m = parts.H.shape[0]
        extras = self.family.layer_extras(self.params, self.config, l, m, self.dtype)
        r = slice(None) if span is None else slice(*span)
        Q, pre = parts.Q[:, r], None if parts.Q_pre_rope is None else parts.Q_pre_rope[:, r]
        mask = np.zeros((m, m), dtype=parts.H.dtype) if mask is None else mask
        queries = tokens if span is None else rows_of(tokens, r)
        return LayerResult(
            tokens=queries, scale=scale, kernel=kernel, softcap=softcap, H=parts.H[r], Wq=w["Wq"],
            Wk=w["Wk"], Wv=w["Wv"], Q=Q, K=parts.K, V=parts.V,
            scores=scaled_scores(Q, parts.K[kv_index(parts)], scale, softcap), mask=mask[r], weights=parts.weights,
            heads=parts.heads[:, r], Wo=w["Wo"], output=parts.output[r], rules=spec, bq=w["bq"], bk=w["bk"],
            bv=w["bv"], bo=w["bo"], Q_pre_rope=pre, K_pre_rope=parts.K_pre_rope, model=self.info(l),
            key_tokens=None if span is None else tokens, rows=None if span is None else np.arange(m)[r], **extras,
            sinks=sink_share(parts.weights) if getattr(self.config.attention, "sinks", False) else None,
        )  # fmt: skip


def layer_masks(family, c: ModelConfig, m: int, n: int, dtype, offset: int = 0) -> list:
    """Each layer's additive mask (m queries at positions offset.., n keys), built once per rule (layers share one
    or two); None where nothing is masked (adding zeros changes no score)."""
    by_rule: dict = {}
    out = []
    for l in range(c.n_layers):
        spec = family.layer_mask(c, l)
        key = spec.key
        if key not in by_rule:
            mask = masks.additive(spec, m, n, dtype, offset=offset)
            by_rule[key] = None if mask is None or not mask.any() else mask
        out.append(by_rule[key])
    return out


def stack_like(x, n: int):  # [m, d] -> an empty [n, m, d] whose slices have x's memory layout
    if x.flags.f_contiguous and not x.flags.c_contiguous:
        return np.empty((n, x.shape[1], x.shape[0]), dtype=x.dtype).transpose(0, 2, 1)
    return np.empty((n, *x.shape), dtype=x.dtype)


def kv_index(parts):  # -> [tau] the key/value head each query head reads
    from qkv_cli.core.gqa import kv_heads_of

    return kv_heads_of(parts.Q.shape[0], parts.K.shape[0])


def check_finite(x, layer: int, name: str) -> None:
    """Refuse activations that overflowed (huge weights): NaN or inf must never reach a table or a file."""
    if not np.isfinite(x).all():
        raise QkvError(
            f"{name}: layer {layer}'s output has NaN or inf values (the weights are too large for this dtype): "
            "try --dtype float64, or check the checkpoint"
        )
