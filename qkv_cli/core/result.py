"""What a run produced: one typed Result, whatever ran. Views pick their renderer by ``result.kind``.

A single attention layer (kinds DENSE, BAND, LAYER) holds its matrices under the export schema's names:
H (m, d), Wq (tau, d, d_k), Wk and Wv (G, d, d_k), Q (tau, m, d_k), K and V (G, n, d_k), scores, mask and
weights (m x n per head), heads (tau, m, d_k), Wo (tau d_k, d) and output (m, d). A MODEL result is a
checkpoint's whole forward pass: every layer's weights in ``attentions`` and a LAYER result per chosen layer.
A BATCH result holds one DENSE result per padded sentence.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

import numpy as np


class Kind(StrEnum):
    DENSE = "dense"  # one attention layer on seeded random weights (self- or cross-attention)
    BAND = "band"  # a long text under a sliding window: only the band of the weights was kept
    LAYER = "layer"  # one layer of a real checkpoint
    MODEL = "model"  # a checkpoint's forward pass: every layer's weights, LAYER results for the chosen layers
    BATCH = "batch"  # several sentences padded to one length, one DENSE result each
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
    kind: Kind
    tokens: object  # qkv_cli.text.tokens.Tokens of the queries
    settings: object = None  # core.settings.Settings of a random-weights run; None for a checkpoint
    scale: float = 1.0
    kernel: str = "vectorized"
    softcap: float | None = None  # attention logit soft-capping c (Gemma 2), applied before the mask
    # one attention layer: DENSE, BAND and LAYER
    H: np.ndarray | None = None
    Wq: np.ndarray | None = None
    Wk: np.ndarray | None = None
    Wv: np.ndarray | None = None
    Q: np.ndarray | None = None
    K: np.ndarray | None = None
    V: np.ndarray | None = None
    scores: np.ndarray | None = None  # (tau, m, n) Q K^T * scale, before the mask (DENSE, LAYER)
    mask: np.ndarray | None = None  # (m, n) additive 0 / -inf (DENSE, LAYER)
    weights: np.ndarray | None = None  # (tau, m, n) (DENSE, LAYER)
    heads: np.ndarray | None = None
    Wo: np.ndarray | None = None
    output: np.ndarray | None = None
    band: np.ndarray | None = None  # (tau, m, n_c) BAND: band[j, i, t] = weight of query i on key i - n_c + 1 + t
    band_keys: np.ndarray | None = None  # (m, n_c) BAND: the key of each slot, -1 before the text
    rules: object = None  # core.masks.MaskSpec: the rules that made `mask`
    context: object = None  # Tokens of the context Y (cross-attention: keys and values from Y)
    key_tokens: object = None  # Tokens of the keys when only some queries are kept (--rows; None: the queries')
    rows: np.ndarray | None = None  # --rows: the query positions kept (LAYER: its rows; MODEL: attentions' rows)
    H_context: np.ndarray | None = None  # (n, d)
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
    latent: dict | None = None  # multi-head latent attention's matrices and widths (models.mla.LatentWeights.steps)
    after_rope: dict | None = None  # Llama 4: {"l2_eps"} (Q, K L2-normed after RoPE) or {"temperature": (m,)}
    model: ModelInfo | None = None
    sink_logits: np.ndarray | None = None  # (tau,) LAYER: head j's sink logit s_j (gpt-oss; None without sinks)
    sinks: np.ndarray | None = None  # the sink's share of each row, 1 - row sum: LAYER (tau, m), MODEL like attentions
    chat: object = None  # pipeline.chat.Prompt: what --chat's template put around the text (None without)
    # MODEL: the whole forward pass
    layers: dict = field(default_factory=dict)  # layer -> LAYER Result, for the chosen layers
    attentions: np.ndarray | None = None  # (L, tau, m, m); (L_kept, tau, rows, m) with attention_layers or rows
    attention_layers: tuple[int, ...] | None = None  # the layers `attentions` holds (None: every layer)
    attention_heads: tuple[int, ...] | None = None  # the heads `attentions` holds (None: every head)
    ids: np.ndarray | None = None  # (m,) vocabulary ids
    hidden_states: np.ndarray | None = None  # (L + 1, m, d): the embeddings, then each block's output
    last_hidden_state: np.ndarray | None = None  # (m, d), after the final norm where the family has one
    layer_types: tuple[str, ...] = ()
    layer_rules: tuple = ()  # core.masks.MaskSpec of each layer (causal; a window on sliding layers)
    # a mixture of experts: each layer's chosen experts, best first (-1 and 0 on a dense layer)
    router_top: np.ndarray | None = None  # (L, m, k) expert indices
    router_weights: np.ndarray | None = None  # (L, m, k) their gate weights g
    predictions: dict | None = (
        None  # --predict: "ids", "probs" (m, k); --logit-lens: "lens_ids", "lens_probs" (L, m, k)
    )
    # GENERATION: tokens = prompt + generated; step t wrote token prompt_len + t, reading positions 0 .. prompt_len+t-1
    prompt_len: int = 0
    step_ids: np.ndarray | None = None  # (steps,) the tokens written
    step_probs: np.ndarray | None = None  # (steps,) the probability the model gave each one
    step_top_ids: np.ndarray | None = None  # (steps, k) the k most probable tokens at each step
    step_top_probs: np.ndarray | None = None  # (steps, k)
    step_top_labels: list = field(default_factory=list)  # (steps, k) their labels
    step_attentions: np.ndarray | None = None  # (steps, L, tau, n_max): the writing query's row, zeros past it
    cache_bytes: int = 0  # what the KV cache held at the end
    timing: dict | None = None  # generation: prefill_seconds (the prompt), seconds (all), seconds_per_token (after)
    text: str = ""  # the generated text
    # BATCH: one padded DENSE result per sentence, and the same cut back to each sentence's own tokens
    padded: list = field(default_factory=list)
    items: list = field(default_factory=list)
    lengths: list = field(default_factory=list)
    # ATTRIBUTION (pipeline.attribution): the attributed layer's Result (weights: its raw alpha) plus these
    method: str = ""  # rollout, value-norm or value-zeroing
    attribution: np.ndarray | None = None  # (m, n): rollout R, the layer's value norms, or value-zeroing scores
    attribution_heads: np.ndarray | None = None  # (tau, m, n) where the method has heads: alpha^h_ij ||f^h(x_j)||
    value_norms: np.ndarray | None = None  # (tau, n) value-norm: ||f^h(x_j)||, f^h(x) = (x W^h_v + b^h_v) W^h_o
    head_fusion: str = ""  # rollout: how a layer's heads were fused (mean, max, min)
    # an encoder-decoder's three attentions (pipeline.seq2seq): decoder_ids, encoder_attentions (L_enc, tau, n, n),
    # decoder_attentions (L_dec, tau, m, m), cross_attentions (L_dec, tau, m, n), encoder_last_hidden_state (n, d)
    seq2seq: dict | None = None
    cost: dict | None = None  # value-zeroing: {"passes", "bytes", "layer_pass_bytes"}

    @property
    def labels(self) -> list[str]:
        return list(self.tokens.labels)

    @property
    def key_labels(self) -> list[str]:
        keys = self.context if self.context is not None else self.key_tokens
        return list((self.tokens if keys is None else keys).labels)

    @property
    def is_cross(self) -> bool:
        return self.context is not None

    @property
    def masked(self) -> np.ndarray:  # (m, n) bool: True where the mask removed the key
        return np.isneginf(self.mask)

    @property
    def empty_rows(self) -> np.ndarray:  # (m,) bool: queries with every key masked (their weights are 0)
        return self.masked.all(axis=1)

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
    def biases(self) -> dict:
        """bq, bk, bv, bo of a checkpoint layer; empty for random weights (which have none)."""
        b = {"bq": self.bq, "bk": self.bk, "bv": self.bv, "bo": self.bo}
        return {k: v for k, v in b.items() if v is not None}

    def layer_masked(self, layer: int) -> np.ndarray:  # MODEL: (m, m) bool, True where layer's mask removes a key
        from qkv_cli.core.masks import allowed_grid, rule_grids

        m = n = self.attentions.shape[-1]
        if self.seq2seq is not None:  # an encoder-decoder's cross-attention: m target rows over n source keys
            m = self.attentions.shape[-2]
        return ~allowed_grid(rule_grids(self.layer_rules[layer], m, n), m, n)

    def first_layer(self) -> Result:
        """MODEL: the first chosen layer's LAYER result; anything else: itself."""
        return self.layers[min(self.layers)] if self.kind == Kind.MODEL else self
