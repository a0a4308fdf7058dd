"""qkv heads and qkv attribute on an encoder-decoder (T5, BART, Marian): one of its self-attentions, or a layer of
its cross-attention, through the same teacher-forced pass as qkv run --target (pipeline.encdec.run).

    heads      --attention encoder (the source, n x n) or decoder (the target, m x m, causal): the head roles
               compare positions of one text, so cross-attention (keys from another text) has none
    attribute  value-norm on any of the three (alpha_ij ||v_j W^o||: V from Y in cross-attention); rollout over
               the encoder's or the decoder's self-attention layers; value zeroing is not offered here
"""

from __future__ import annotations

import numpy as np

from qkv_cli.core.result import Result, attributed
from qkv_cli.errors import QkvError


def each(model, texts: list[str], req) -> list[Result]:
    """qkv heads: one MODEL Result per text, of the self-attention --attention names (encoder or decoder)."""
    from qkv_cli.pipeline.encdec import run as encdec

    encdec.check_model(model, req.encdec.target, req.encdec.attention)
    attention = req.encdec.attention or "cross"
    if attention == "cross":
        raise QkvError("qkv heads reads self-attention (self, previous and first token are positions of one text): "
                       "give --attention encoder (the source) or decoder (the target)")  # fmt: skip
    if req.inputs.chat is not None:
        raise QkvError(f"--chat uses a chat template: {model.name} is an encoder-decoder and has none")
    return [encdec.run(model, t, req.encdec.target, attention, settings=req.settings, max_memory=req.limits.max_memory)
            for t in texts]  # fmt: skip


def attribute(model, text: str, req) -> Result:
    """qkv attribute: rollout or value-norm of layer --layer (default the last) of the attention --attention names."""
    from qkv_cli.pipeline.attribution import rollout, value_norms, value_vectors
    from qkv_cli.pipeline.encdec import run as encdec

    encdec.check_model(model, req.encdec.target, req.encdec.attention)
    attention = req.encdec.attention or "cross"
    if req.inputs.chat is not None:
        raise QkvError(f"--chat uses a chat template: {model.name} is an encoder-decoder and has none")
    if req.attribution.method == "value-zeroing":
        raise QkvError(f"--method value-zeroing reruns a layer of a decoder or encoder alone: on {model.name} (an "
                       "encoder-decoder) use value-norm or rollout")  # fmt: skip
    if req.attribution.method == "rollout" and attention == "cross":
        raise QkvError("--method rollout multiplies self-attention layer by layer: cross-attention's keys are the "
                       "source, not the previous layer's queries; give --attention encoder or decoder, or use "
                       "--method value-norm")  # fmt: skip
    run = encdec.run(
        model, text, req.encdec.target, attention, layers=req.keep.layers, max_memory=req.limits.max_memory
    )
    L = min(run.layers)
    out = attributed(run.layers[L], method=req.attribution.method, ids=np.asarray(run.layers[L].tokens.ids))
    if req.attribution.method == "rollout":
        out.head_fusion = req.attribution.head_fusion or "mean"
        out.attribution = rollout(run.attentions, L, out.head_fusion)
    else:
        out.attribution, out.attribution_heads, out.value_norms = value_norms(out.weights, value_vectors(out.V, out.Wo))
    return out


def mask_grid(model, text: str, target: str | None, attention: str | None, layers=()) -> list:
    """qkv mask: the Mask of one attention over its own tokens: encoder (source x source, nothing removed), decoder
    (target x target, causal), cross (target x source, nothing removed). Every layer of a stack has the same."""
    from qkv_cli.core import masks
    from qkv_cli.models import select_layers
    from qkv_cli.models.encdec_model import check_side
    from qkv_cli.pipeline.encdec import run as encdec
    from qkv_cli.pipeline.maskgrid import MaskGrid, check_cells

    encdec.check_model(model, target, attention)
    attention = check_side(attention or "cross")
    src, dec = model.tokenize(text), encdec.decoder_tokens(model, target)
    queries, keys = (src, src) if attention == "encoder" else (dec, src if attention == "cross" else dec)
    m, n = len(queries.labels), len(keys.labels)
    check_cells(m, n)
    chosen = select_layers(list(layers), model.n_layers(attention)) if layers else [0]
    info = {"name": model.name, "family": model.config.family}
    grids = masks.rule_grids(model.rules(attention), m, n)
    return [MaskGrid(list(queries.labels), list(keys.labels), grids, None, info, layer, f"{attention}_attention")
            for layer in chosen]  # fmt: skip
