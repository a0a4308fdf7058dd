"""What a run produced: one Result class per kind of run, over a shared base. Views pick their renderer by
``result.kind``; each class holds only its own fields.

- LayerResult (kinds SEEDED and LAYER): one attention layer's matrices under the export schema's names: H (m, d),
  Wq (tau, d, d_k), Wk and Wv (G, d, d_k), Q (tau, m, d_k), K and V (G, n, d_k), scores, mask and weights (m x n
  per head), heads (tau, m, d_k), Wo (tau d_k, d) and output (m, d). SEEDED: seeded random weights; LAYER: a
  checkpoint's layer (``model`` says which).
- BandResult: a long text under a sliding window, the same matrices but only the band of the weights.
- AttributionResult: a LayerResult (weights: its raw alpha) plus how much each key moves each query.
- ModelResult: a checkpoint's whole forward pass: every layer's weights in ``attentions``, a LayerResult per
  chosen layer.
- GenerationResult: a decoder writing, per generated token its probability and attention row.
- BatchResult: one SEEDED LayerResult per padded sentence.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import ClassVar

import numpy as np


class Kind(StrEnum):
    SEEDED = (
        "dense"  # one attention layer on seeded random weights (self- or cross-attention); "dense" in the page and API
    )
    BAND = "band"  # a long text under a sliding window: only the band of the weights was kept
    LAYER = "layer"  # one layer of a real checkpoint
    MODEL = "model"  # a checkpoint's forward pass: every layer's weights, LAYER results for the chosen layers
    BATCH = "batch"  # several sentences padded to one length, one SEEDED result each
    GENERATION = "generation"  # a decoder writing: per generated token, its probability and attention rows
    ATTRIBUTION = "attribution"  # one layer's Result plus how much each key moves each query (rollout, value norms ...)


@dataclass
class ModelInfo:
    """The checkpoint behind a LAYER or MODEL result, as the family describes it."""

    name: str
    family: str
    n_layers: int
    causal: bool
    layer: int | None = None  # LAYER: which one (0-based)
    layer_type: str = ""  # e.g. "sliding_attention" or "full_attention"; "" for families with one kind
    window: int | None = None  # the layer's sliding window n_c, if it has one
    attention_input: str = "the layer input"  # what H is for this family's attention, in words
    rope: bool | None = None  # a RoPE decoder's layer: whether it turns Q and K (False: a NoPE layer, SmolLM3)


@dataclass
class Result:
    """The shared base: the query tokens and how the run was made."""

    kind: ClassVar[Kind]
    tokens: object  # qkv_cli.text.tokens.Tokens of the queries
    settings: object = None  # core.settings.Settings of a random-weights run; None for a checkpoint
    kernel: str = "vectorized"
    model: ModelInfo | None = None  # the checkpoint (None: seeded random weights)
    chat: object = None  # pipeline.chat.Prompt: what --chat's template put around the text (None without)
    context: object = None  # Tokens of the context Y: cross-attention's keys and values come from Y (else None)

    @property
    def labels(self) -> list[str]:
        return list(self.tokens.labels)

    @property
    def key_labels(self) -> list[str]:
        return list((self.tokens if self.context is None else self.context).labels)

    @property
    def is_cross(self) -> bool:
        return self.context is not None

    @property
    def token_ids(self):
        """The vocabulary ids: the run's own where its kind records them (a checkpoint's ``ids``), else its tokens'
        (None for the word tokenizer of random weights)."""
        own = getattr(self, "ids", None)  # a field of ModelResult, GenerationResult and AttributionResult only
        return self.tokens.ids if own is None else own

    def first_layer(self) -> Result:
        """MODEL: the first chosen layer's LAYER result; anything else: itself."""
        return self


@dataclass
class Projections(Result):
    """The matrices of one attention layer that a band keeps too: H, the projections, the heads and the output."""

    scale: float = 1.0
    softcap: float | None = None  # attention logit soft-capping c (Gemma 2), applied before the mask
    H: np.ndarray | None = None
    Wq: np.ndarray | None = None
    Wk: np.ndarray | None = None
    Wv: np.ndarray | None = None
    Q: np.ndarray | None = None
    K: np.ndarray | None = None
    V: np.ndarray | None = None
    heads: np.ndarray | None = None
    Wo: np.ndarray | None = None
    output: np.ndarray | None = None
    rules: object = None  # core.masks.MaskSpec: the rules of the mask

    @property
    def tau(self) -> int:
        return self.Q.shape[0]

    @property
    def G(self) -> int:
        return self.K.shape[0]

    @property
    def d_k(self) -> int:
        return self.Q.shape[2]

    @property
    def d(self) -> int:
        return self.H.shape[1]

    @property
    def dtype(self) -> str:
        return str(self.H.dtype)

    @property
    def heads_drawn(self) -> int:  # how many heads a figure of this result can show
        return self.weights.shape[0]


@dataclass
class LayerResult(Projections):
    """One attention layer: SEEDED (seeded random weights, ``model`` None) or LAYER (a checkpoint's)."""

    scores: np.ndarray | None = None  # (tau, m, n) Q K^T * scale, before the mask
    mask: np.ndarray | None = None  # (m, n) additive 0 / -inf
    weights: np.ndarray | None = None  # (tau, m, n)
    key_tokens: object = None  # Tokens of the keys when only some queries are kept (--rows; None: the queries')
    rows: np.ndarray | None = None  # --rows: the query positions kept
    H_context: np.ndarray | None = None  # (n, d): the context Y of cross-attention
    ablation: dict | None = None  # what --ablate changed (pipeline.ablate.report)
    # a checkpoint layer: biases (Q = H Wq + bq) and the queries and keys before RoPE
    bq: np.ndarray | None = None
    bk: np.ndarray | None = None
    bv: np.ndarray | None = None
    bo: np.ndarray | None = None
    Q_pre_rope: np.ndarray | None = None
    K_pre_rope: np.ndarray | None = None
    rope_freq: np.ndarray | None = None  # (rot/2,) theta_k at this text's length: pair k turns by p * theta_k
    rope_scaling: float = 1.0  # multiplies cos and sin (YaRN)
    qk_norm: dict | None = None  # {"q", "k": norm weights, "eps", "offset", "per_head"}: RMSNorm of Q and K
    latent: dict | None = None  # multi-head latent attention's matrices and widths (layers.mla.LatentWeights.steps)
    after_rope: dict | None = None  # Llama 4: {"l2_eps"} (Q, K L2-normed after RoPE) or {"temperature": (m,)}
    sink_logits: np.ndarray | None = None  # (tau,) head j's sink logit s_j (gpt-oss; None without sinks)
    sinks: np.ndarray | None = None  # (tau, m): the sink's share of each row, 1 - row sum

    @property
    def kind(self) -> Kind:
        return Kind.SEEDED if self.model is None else Kind.LAYER

    @property
    def key_labels(self) -> list[str]:
        return kept_key_labels(self)

    @property
    def masked(self) -> np.ndarray:  # (m, n) bool: True where the mask removed the key
        return np.isneginf(self.mask)

    @property
    def empty_rows(self) -> np.ndarray:  # (m,) bool: queries with every key masked (their weights are 0)
        return self.masked.all(axis=1)

    @property
    def biases(self) -> dict:
        """bq, bk, bv, bo of a checkpoint layer; empty for random weights (which have none)."""
        b = {"bq": self.bq, "bk": self.bk, "bv": self.bv, "bo": self.bo}
        return {k: v for k, v in b.items() if v is not None}


@dataclass
class BandResult(Projections):
    """A long text under a sliding window: the band of the weights, never m x m."""

    kind: ClassVar[Kind] = Kind.BAND
    band: np.ndarray | None = None  # (tau, m, n_c): band[j, i, t] = weight of query i on key i - n_c + 1 + t
    band_keys: np.ndarray | None = None  # (m, n_c): the key of each slot, -1 before the text


@dataclass
class AttributionResult(LayerResult):
    """The attributed layer (pipeline.attribution; weights: its raw alpha) plus how much each key moves each query."""

    method: str = ""  # rollout, value-norm or value-zeroing
    attribution: np.ndarray | None = None  # (m, n): rollout R, the layer's value norms, or value-zeroing scores
    attribution_heads: np.ndarray | None = None  # (tau, m, n) where the method has heads: alpha^h_ij ||f^h(x_j)||
    value_norms: np.ndarray | None = None  # (tau, n) value-norm: ||f^h(x_j)||, f^h(x) = (x W^h_v + b^h_v) W^h_o
    head_fusion: str = ""  # rollout: how a layer's heads were fused (mean, max, min)
    cost: dict | None = None  # value-zeroing: {"passes", "bytes", "layer_pass_bytes"}
    ids: np.ndarray | None = None  # (m,) vocabulary ids

    @property
    def kind(self) -> Kind:
        return Kind.ATTRIBUTION


def kept_key_labels(r: LayerResult | ModelResult) -> list[str]:
    """The key labels of a run that kept some query rows (--rows): the context's, or every token's (key_tokens)."""
    keys = r.context if r.context is not None else r.key_tokens
    return list((r.tokens if keys is None else keys).labels)


def attributed(layer: LayerResult, **values) -> AttributionResult:
    """The AttributionResult of ``layer``: its own fields, plus ``values`` (method, attribution ...)."""
    from dataclasses import fields

    return AttributionResult(**{f.name: getattr(layer, f.name) for f in fields(LayerResult)} | values)


@dataclass
class ModelResult(Result):
    """A checkpoint's whole forward pass."""

    kind: ClassVar[Kind] = Kind.MODEL
    layers: dict = field(default_factory=dict)  # layer -> LayerResult, for the chosen layers
    attentions: np.ndarray | None = None  # (L, tau, m, m); (L_kept, tau, rows, m) with attention_layers or rows
    attention_layers: tuple[int, ...] | None = None  # the layers `attentions` holds (None: every layer)
    attention_heads: tuple[int, ...] | None = None  # the heads `attentions` holds (None: every head)
    rows: np.ndarray | None = None  # --rows: the query positions `attentions` holds
    key_tokens: object = None  # Tokens of the keys when only some queries are kept (--rows; None: the queries')
    ids: np.ndarray | None = None  # (m,) vocabulary ids
    hidden_states: np.ndarray | None = None  # (L + 1, m, d): the embeddings, then each block's output
    last_hidden_state: np.ndarray | None = None  # (m, d), after the final norm where the family has one
    layer_types: tuple[str, ...] = ()
    layer_rules: tuple = ()  # core.masks.MaskSpec of each layer (causal; a window on sliding layers)
    sinks: np.ndarray | None = None  # the sink's share of each row, 1 - row sum, like attentions without keys
    # a mixture of experts: each layer's chosen experts, best first (-1 and 0 on a dense layer)
    router_top: np.ndarray | None = None  # (L, m, k) expert indices
    router_weights: np.ndarray | None = None  # (L, m, k) their gate weights g
    predictions: dict | None = None  # --predict: "ids", "probs" (m, k); --logit-lens: "lens_ids", "lens_probs"
    ablation: dict | None = None  # an encoder-decoder's --ablate: what it changed (pipeline.ablate.report)
    # an encoder-decoder's three attentions (pipeline.encdec.run): decoder_ids, encoder_attentions (L_enc, tau, n, n),
    # decoder_attentions (L_dec, tau, m, m), cross_attentions (L_dec, tau, m, n), encoder_last_hidden_state (n, d)
    encdec: dict | None = None

    @property
    def key_labels(self) -> list[str]:
        return kept_key_labels(self)

    def layer_masked(self, layer: int) -> np.ndarray:  # (m, m) bool, True where layer's mask removes a key
        from qkv_cli.core.masks import allowed_grid, rule_grids

        m = n = self.attentions.shape[-1]
        if self.encdec is not None:  # an encoder-decoder's cross-attention: m target rows over n source keys
            m = self.attentions.shape[-2]
        return ~allowed_grid(rule_grids(self.layer_rules[layer], m, n), m, n)

    def first_layer(self) -> LayerResult:
        """The first chosen layer's LayerResult."""
        return self.layers[min(self.layers)]

    heads_drawn = property(lambda self: self.attentions.shape[1])  # the heads a figure of it can show


@dataclass
class GenerationResult(Result):
    """A model writing. tokens = prompt + generated; step t wrote token prompt_len + t, reading positions
    0 .. prompt_len + t - 1."""

    kind: ClassVar[Kind] = Kind.GENERATION
    ids: np.ndarray | None = None  # (prompt_len + steps,) vocabulary ids (an encoder-decoder: the source's)
    prompt_len: int = 0
    step_ids: np.ndarray | None = None  # (steps,) the tokens written
    step_probs: np.ndarray | None = None  # (steps,) the probability the model gave each one
    step_top_ids: np.ndarray | None = None  # (steps, k) the k most probable tokens at each step
    step_top_probs: np.ndarray | None = None  # (steps, k)
    step_top_labels: list = field(default_factory=list)  # (steps, k) their labels
    step_attentions: np.ndarray | None = None  # (steps, L, tau, n_max): the writing query's row, zeros past it
    step_sinks: np.ndarray | None = None  # (steps, L, tau): gpt-oss: the sink's share of each writing row
    cache_bytes: int = 0  # what the KV cache held at the end
    timing: dict | None = None  # prefill_seconds (the prompt), seconds (all), seconds_per_token (after)
    text: str = ""  # the generated text
    heads_drawn = property(lambda self: self.step_attentions.shape[2])  # the heads a figure of it can show


@dataclass
class BatchResult(Result):
    """Several sentences padded to one length: one padded SEEDED result per sentence, and the same cut back to each
    sentence's own tokens."""

    kind: ClassVar[Kind] = Kind.BATCH
    padded: list = field(default_factory=list)
    items: list = field(default_factory=list)
    lengths: list = field(default_factory=list)
    heads_drawn = property(lambda self: self.padded[0].tau)  # the heads a figure of it can show
