"""What the Python API returns: one small class per kind of run over a shared base, each with only its own fields.
Every class wraps the pipeline's Result (``.result``), exposes its arrays under the export schema's names (as the
NPZ and JSON files), shows itself in a notebook as the offline page (``_repr_html_``) and saves what the CLI saves
(``save_npz``, ``page().save``). No array is copied: the attributes are the run's own arrays."""

from __future__ import annotations

from typing import TYPE_CHECKING

from qkv_cli.errors import QkvError

if TYPE_CHECKING:  # for the hints only: importing qkv_cli loads neither
    import numpy as np

    from qkv_cli.views.figures.heatmaps import Figure


class Output:
    """The shared base: the tokens, the kind, the page, the NPZ."""

    kind = ""

    def __init__(self, result, model=None):
        self.result = result
        self._model = model

    @property
    def tokens(self) -> list[str]:
        """The query tokens as readable labels (``Ġcat`` -> ``cat``), as tables and figures show them."""
        return list(self.result.labels)

    @property
    def raw_tokens(self) -> list[str]:
        """The tokenizer's own strings (``Ġcat``)."""
        return list(self.result.tokens.strings)

    @property
    def ids(self) -> np.ndarray | None:
        """(m,) vocabulary ids of the tokens, or None for the word tokenizer of random weights."""
        import numpy as np

        ids = self.result.token_ids
        return None if ids is None else np.asarray(ids)

    def arrays(self) -> dict:
        """Every array the NPZ export holds, by its export name."""
        from qkv_cli.views.kinds import arrays

        return arrays(self.result)

    def save_npz(self, path) -> str:
        """Write ``arrays()`` to an NPZ file (atomically; refuses a path that is not a regular file)."""
        from qkv_cli.views.export.writing import save_npz

        return str(save_npz(self.arrays(), path))

    def page(self, **options):  # -> api.show.Page
        """The offline page of this result (see ``qkv_cli.api.page``)."""
        from qkv_cli.api.show import page

        return page(self, **options)

    def heatmap(self, **options) -> Figure:
        """A matplotlib Figure of this result (see ``qkv_cli.api.heatmap``)."""
        from qkv_cli.api.show import heatmap

        return heatmap(self, **options)

    def _repr_html_(self) -> str:
        return self.page()._repr_html_()

    def __repr__(self) -> str:
        shown = " ".join(self.tokens[:6]) + (" ..." if len(self.tokens) > 6 else "")
        return f"<qkv {self.kind}: m={len(self.tokens)} {shown}>"


LAYER_FIELDS = ("H", "Wq", "Wk", "Wv", "Q", "K", "V", "scores", "mask", "weights", "heads", "Wo", "output",
                "bq", "bk", "bv", "bo", "Q_pre_rope", "K_pre_rope", "rope_freq", "H_context")  # fmt: skip


class Layer(Output):
    """One attention layer: seeded random weights (``qkv.run(text, d=..., heads=...)``) or a checkpoint's layer.

    Attributes, by the export schema: H (m, d), Wq (tau, d, d_k), Wk and Wv (G, d, d_k), Q (tau, m, d_k), K and V
    (G, n, d_k), scores, mask and weights (tau, m, n; mask (m, n) additive 0 / -inf), heads (tau, m, d_k), Wo
    (tau d_k, d), output (m, d); a checkpoint adds its biases bq, bk, bv, bo and Q_pre_rope, K_pre_rope where the
    family has them (None elsewhere)."""

    kind = "layer"

    def __getattr__(self, name):
        if name in LAYER_FIELDS:
            return getattr(self.result, name)
        raise AttributeError(f"a qkv Layer has no {name!r}: it holds {', '.join(LAYER_FIELDS)}")

    @property
    def key_tokens(self) -> list[str]:
        """The key tokens (the context Y's for cross-attention, else the queries')."""
        return list(self.result.key_labels)

    @property
    def scale(self) -> float:
        return float(self.result.scale)

    @property
    def tau(self) -> int:
        return self.result.tau

    @property
    def d_k(self) -> int:
        return self.result.d_k

    @property
    def layer_index(self) -> int | None:
        """Which layer of the checkpoint (0-based), or None for random weights."""
        return None if self.result.model is None else self.result.model.layer


ENCDEC = ("encoder_attentions", "decoder_attentions", "cross_attentions", "decoder_ids", "encoder_last_hidden_state")


class ModelRun(Output):
    """A checkpoint's forward pass: ``attentions`` (L, tau, m, m; (L_kept, tau, rows, m) when only some layers or
    rows were kept: see ``attention_layers``, ``rows``), ``ids`` (m,), ``hidden_states`` (L + 1, m, d),
    ``last_hidden_state`` (m, d), ``layer_types``, ``routing`` (a MoE's experts per token); ``layer(l)``: one
    layer's matrices; an encoder-decoder: ENCDEC."""

    kind = "model"

    def __init__(self, result, model=None, request=None):  # request: layer(l) runs it again for a layer not kept
        super().__init__(result, model)
        self._request = request

    @property
    def attentions(self) -> np.ndarray:
        return self.result.attentions

    @property
    def attention_layers(self) -> tuple[int, ...]:
        """The layers ``attentions`` holds, in order (every layer unless the budget kept only ``layer=``'s)."""
        kept = self.result.attention_layers
        return tuple(range(self.n_layers)) if kept is None else tuple(kept)

    @property
    def rows(self) -> np.ndarray:
        """The query positions ``attentions`` holds (m,), or those ``rows=`` kept."""
        import numpy as np

        return np.arange(len(self.result.ids)) if self.result.rows is None else self.result.rows

    @property
    def hidden_states(self) -> np.ndarray | None:
        return self.result.hidden_states

    @property
    def last_hidden_state(self) -> np.ndarray:
        return self.result.last_hidden_state

    @property
    def layer_types(self) -> tuple[str, ...]:
        return tuple(self.result.layer_types)

    @property
    def predictions(self) -> dict | None:
        """With ``predict=True``: "ids" and "probs" (m, k); ``logit_lens=True`` adds "lens_ids", "lens_probs"."""
        return self.result.predictions

    @property
    def routing(self):  # a mixture of experts: (router_top, router_weights), (L, m, k) each; None if dense
        r = self.result
        return None if r.router_top is None else (r.router_top, r.router_weights)

    @property
    def n_layers(self) -> int:
        return len(self.result.layer_types)

    def __getattr__(self, name):  # an encoder-decoder's run: its three attentions, by transformers' names
        if name in ENCDEC and self.result.encdec is not None:
            return self.result.encdec[name]
        raise AttributeError(f"a qkv ModelRun has no {name!r} (encoder-decoders have {', '.join(ENCDEC)})")

    def layer(self, index: int) -> Layer:
        """Layer ``index`` (negative counts from the end) with every matrix; run again if it was not kept."""
        from qkv_cli.models import check_layer

        index = check_layer(index, self.n_layers)
        if index not in self.result.layers:
            if self._model is None or self._request is None:
                raise QkvError(f"layer {index} was not kept: run again with layer={index}")
            from qkv_cli.pipeline.compute import compute

            again = compute(self._request.changed(layers=(index,), predict=False, logit_lens=False), self._model)
            self.result.layers[index] = again.layers[index]
        return Layer(self.result.layers[index], self._model)


class Generation(Output):
    """A decoder writing: ``text`` (the generated text), ``ids`` (prompt + written), ``prompt_len``, ``steps``
    (one dict per written token: token, id, prob, top alternatives, the earlier tokens attended most) and
    ``step_attentions`` (steps, L, tau, n_max): the writing query's row, zeros past it."""

    kind = "generation"

    @property
    def text(self) -> str:
        return self.result.text

    @property
    def prompt_len(self) -> int:
        return int(self.result.prompt_len)

    @property
    def written_ids(self) -> np.ndarray:
        return self.result.step_ids

    @property
    def step_attentions(self) -> np.ndarray:
        return self.result.step_attentions

    def steps(self, layer: int | None = None, heads=None) -> list[dict]:
        """The per-token rows of ``qkv generate`` (attention averaged over ``heads`` of ``layer``, default all)."""
        from qkv_cli.views.generate import steps

        tau = self.result.step_attentions.shape[2]
        return steps(self.result, layer, list(range(tau)) if heads is None else list(heads))


class Attribution(Output):
    """Rollout, value norms or value zeroing: ``attribution`` (m, n), ``weights`` (the layer's raw alpha),
    ``attribution_heads`` and ``value_norms`` where the method has them, ``method``, ``head_fusion``."""

    kind = "attribution"

    @property
    def method(self) -> str:
        return self.result.method

    @property
    def head_fusion(self) -> str:
        return self.result.head_fusion

    @property
    def attribution(self) -> np.ndarray:
        return self.result.attribution

    @property
    def attribution_heads(self) -> np.ndarray | None:
        return self.result.attribution_heads

    @property
    def value_norms(self) -> np.ndarray | None:
        return self.result.value_norms

    @property
    def weights(self) -> np.ndarray:
        return self.result.weights

    def received(self) -> list[dict]:
        """Per key: the share of attribution it receives, as the CLI's table shows it."""
        from qkv_cli.views.attribution import received

        return received(self.result)


class Band(Output):
    """A long document under a sliding window: ``band`` (tau, m, n_c), ``band_keys`` (m, n_c; -1 before the text)."""

    kind = "band"

    @property
    def band(self) -> np.ndarray:
        return self.result.band

    @property
    def band_keys(self) -> np.ndarray:
        return self.result.band_keys


class Batch(Output):
    """Sentences padded together: ``items`` (a Layer per sentence, cut to its tokens), ``padded``, ``lengths``."""

    kind = "batch"

    @property
    def items(self) -> list[Layer]:
        return [Layer(r) for r in self.result.items]

    @property
    def padded(self) -> list[Layer]:
        return [Layer(r) for r in self.result.padded]

    @property
    def lengths(self) -> list[int]:
        return list(self.result.lengths)

    @property
    def tokens(self) -> list[str]:
        return [t for r in self.result.items for t in r.labels]
