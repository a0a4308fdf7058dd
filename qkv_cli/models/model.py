"""A loaded checkpoint and its NumPy forward pass, with every layer's attention kept for inspection."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from qkv_cli.errors import QkvError
from qkv_cli.models import bert, gpt2
from qkv_cli.models.config import ModelConfig, Param, parameter_table

FAMILY_MODULES = {"bert": bert, "gpt2": gpt2}
DETAIL_FIELDS = tuple("H Wq Wk Wv bq bk bv Wo bo Q K V scores mask weights heads output".split())


@dataclass
class LayerDetail:
    """One layer's attention sub-layer in the export schema; Q = H Wq + bq per head, output = concat(heads) Wo + bo.

    H is the attention's input: the layer input for BERT (post-LN), LN_1 of it for GPT-2 (pre-LN).
    """

    layer: int  # 0-based
    scale: float  # the factor applied to Q K^T
    H: np.ndarray  # (m, d)
    Wq: np.ndarray  # (tau, d, dk)
    Wk: np.ndarray  # (tau, d, dk)
    Wv: np.ndarray  # (tau, d, dk)
    bq: np.ndarray  # (tau, dk)
    bk: np.ndarray  # (tau, dk)
    bv: np.ndarray  # (tau, dk)
    Wo: np.ndarray  # (d, d)
    bo: np.ndarray  # (d,)
    Q: np.ndarray  # (tau, m, dk)
    K: np.ndarray  # (tau, m, dk)
    V: np.ndarray  # (tau, m, dk)
    scores: np.ndarray  # (tau, m, m) Q K^T * scale, before the mask
    mask: np.ndarray  # (m, m) additive: 0 or -inf (all zeros for BERT)
    weights: np.ndarray  # (tau, m, m) Softmax(scores + mask)
    heads: np.ndarray  # (tau, m, dk) per-head outputs alpha V
    output: np.ndarray  # (m, d) concat(heads) Wo + bo, before the residual and LayerNorm

    def arrays(self) -> dict[str, np.ndarray]:
        """The schema fields as contiguous arrays (for NPZ / JSON export)."""
        return {name: np.ascontiguousarray(getattr(self, name)) for name in DETAIL_FIELDS}


@dataclass
class ModelResult:
    """One forward pass. attentions and hidden_states hold every layer; `layers` holds the requested details."""

    config: ModelConfig
    tokens: object  # qkv_cli.tokens.Tokens, or None when the forward was given ids only
    ids: np.ndarray  # (m,) int64
    attentions: np.ndarray  # (L, tau, m, m): every layer's attention weights
    hidden_states: np.ndarray  # (L+1, m, d): embeddings, then each block's output (GPT-2: the last after LN_f)
    last_hidden_state: np.ndarray  # (m, d) = hidden_states[-1]
    layers: dict[int, LayerDetail] = field(default_factory=dict)
    kernel: str = "vectorized"

    @property
    def labels(self) -> list[str]:
        if self.tokens is None:
            return [str(i) for i in self.ids]
        return list(self.tokens.labels)

    def layer(self, index: int) -> LayerDetail:
        """The detail of layer `index` (negative counts from the end); it must have been requested."""
        L = self.config.n_layers
        l = check_layer(index, L)
        if l not in self.layers:
            kept = ", ".join(map(str, self.layers)) or "none"
            raise QkvError(f"layer {index} was not kept by this forward pass (kept: {kept}); ask for it with layers=")
        return self.layers[l]

    def arrays(self, layer: int = -1) -> dict[str, np.ndarray]:
        """What an NPZ/JSON export of a model run holds: tokens, ids, attentions (L, tau, m, m), last_hidden_state,
        the chosen layer's schema fields (H, Wq, Wk, Wv, bq, bk, bv, Wo, bo, Q, K, V, scores, mask, weights, heads,
        output) and the scalars layer, n_layers, d, tau, scale, kernel, model."""
        det = self.layer(layer)
        c = self.config
        labels = self.labels
        out = {
            "tokens": np.array(labels, dtype=str),
            "ids": self.ids,
            "attentions": self.attentions,
            "last_hidden_state": self.last_hidden_state,
        }
        out.update(det.arrays())
        out.update(
            layer=np.int64(det.layer),
            n_layers=np.int64(c.n_layers),
            d=np.int64(c.d),
            tau=np.int64(c.n_heads),
            scale=np.float64(det.scale),
            kernel=np.array(self.kernel),
            model=np.array(c.name),
        )
        return out


def check_layer(index: int, n_layers: int) -> int:
    """A 0-based layer index (negative counts from the end) -> 0..L-1, or QkvError naming the valid range."""
    if isinstance(index, bool) or not isinstance(index, int | np.integer):
        raise QkvError(f"layer must be an integer, got {index!r}")
    if not -n_layers <= index < n_layers:
        raise QkvError(
            f"layer {index} does not exist: the model has {n_layers} layers (0..{n_layers - 1}, or -1 for the last)"
        )
    return int(index) % n_layers


def select_layers(layers, n_layers: int) -> list[int]:
    """None -> []; "all" -> every layer; an int or a list of ints (negative from the end) -> sorted unique."""
    if layers is None:
        return []
    if isinstance(layers, str):
        if layers == "all":
            return list(range(n_layers))
        raise QkvError(f"layers must be 'all', an integer or a list of integers, got {layers!r}")
    if not hasattr(layers, "__iter__"):
        layers = [layers]
    return sorted({check_layer(l, n_layers) for l in layers})


class Model:
    """A checkpoint loaded for the NumPy forward pass: config, prepared weights, tokenizer (loaded on first use)."""

    def __init__(self, config: ModelConfig, path: Path, dtype, params, name: str = ""):
        self.config = config
        self.path = Path(path)
        self.dtype = np.dtype(dtype)
        self.params = params
        self.name = name or config.name or self.path.name
        self.family = FAMILY_MODULES[config.family]
        self._tokenizer = None

    def __repr__(self) -> str:
        c = self.config
        return f"Model({self.name!r}, {c.family}, L={c.n_layers}, tau={c.n_heads}, d={c.d}, dtype={self.dtype.name})"

    @property
    def tokenizer(self):
        if self._tokenizer is None:
            from qkv_cli.tokens import load_tokenizer

            tok_path = self.path / "tokenizer.json"
            if not tok_path.is_file():
                raise QkvError(f"no tokenizer.json in '{self.path}': qkv needs the model's own tokenizer.json")
            self._tokenizer = load_tokenizer(tok_path)
        return self._tokenizer

    def tokenize(self, text: str):
        """The model's own tokens for `text`, with its special tokens ([CLS] ... [SEP] for BERT)."""
        from qkv_cli.tokens import encode

        tokens = encode(self.tokenizer, text, add_special_tokens=True)
        self.check_length(len(tokens))
        return tokens

    def check_length(self, m: int) -> None:
        limit = self.config.max_positions
        if m > limit:
            key = "max_position_embeddings" if self.config.family == "bert" else "n_positions"
            raise QkvError(f"the text has {m} tokens but {self.name} accepts at most {limit} ({key}): shorten the text")
        if m < 1:
            raise QkvError("the text has no tokens")

    def parameters(self) -> list[Param]:
        return parameter_table(self.config)

    def layer_weights(self, index: int) -> dict[str, np.ndarray]:
        """Wq, Wk, Wv (tau, d, dk), bq, bk, bv (tau, dk), Wo (d, d), bo (d,) of one layer (views)."""
        return self.params.blocks[check_layer(index, self.config.n_layers)].attn.per_head()

    def run(self, text: str, layers=None, kernel: str = "vectorized") -> ModelResult:
        """Tokenize `text` and run the forward pass; `layers` chooses which layers keep their full detail."""
        tokens = self.tokenize(text)
        return self.forward(tokens.ids, layers=layers, kernel=kernel, tokens=tokens)

    def forward(self, ids, layers=None, kernel: str = "vectorized", tokens=None, type_ids=None) -> ModelResult:
        """The forward pass on vocabulary ids (m,).

        layers: None (no details, the fastest), "all", or layer indices (0-based; -1 the last) whose LayerDetail
        is kept. Every layer's attention weights are always in `attentions`. kernel: a qkv_cli.kernels name.
        """
        c = self.config
        ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        m = ids.size
        self.check_length(m)
        if ids.min() < 0 or ids.max() >= c.vocab_size:
            raise QkvError(f"token ids must be in 0..{c.vocab_size - 1}, got {int(ids.min())}..{int(ids.max())}")
        keep = set(select_layers(layers, c.n_layers))
        fam, p = self.family, self.params
        dt = self.dtype
        mask = fam.mask(m, dt)
        x = fam.embed(p, c, ids, type_ids)
        hidden = np.empty((c.n_layers + 1, m, c.d), dtype=dt)
        attentions = np.empty((c.n_layers, c.n_heads, m, m), dtype=dt)
        hidden[0] = x
        details = {}
        for l, blk in enumerate(p.blocks):
            scale = fam.scale(c, l)
            x, parts = fam.block(blk, c, x, mask, scale, kernel)
            attentions[l] = parts.weights
            hidden[l + 1] = x
            if l in keep:
                details[l] = _detail(l, parts, blk.attn, m)
        hidden[-1] = fam.final(p, c, x)
        return ModelResult(
            config=c,
            tokens=tokens,
            ids=ids,
            attentions=attentions,
            hidden_states=hidden,
            last_hidden_state=hidden[-1],
            layers=details,
            kernel=kernel,
        )


def _detail(l: int, parts, attn, m: int) -> LayerDetail:
    Q, K = parts.Q, parts.K
    scores = Q @ K.transpose(0, 2, 1)  # (tau, m, dk) x (tau, dk, m) -> (tau, m, m)
    scores *= Q.dtype.type(parts.scale)
    mask = np.zeros((m, m), dtype=Q.dtype) if parts.mask is None else parts.mask
    return LayerDetail(
        layer=l,
        scale=parts.scale,
        H=parts.H,
        **attn.per_head(),
        Q=Q,
        K=K,
        V=parts.V,
        scores=scores,
        mask=mask,
        weights=parts.weights,
        heads=parts.heads,
        output=parts.output,
    )


def estimate_bytes(config: ModelConfig, m: int, dtype="float32", detailed_layers: int = 0) -> int:
    """Rough memory a forward pass of m tokens keeps: attentions, hidden states and per-layer detail."""
    item = np.dtype(dtype).itemsize
    L, tau, d = config.n_layers, config.n_heads, config.d
    base = L * tau * m * m + (L + 1) * m * d + m * config.d_ff + 3 * m * d
    per_layer = 3 * tau * m * m + 6 * m * d
    return item * (base + detailed_layers * per_layer)
