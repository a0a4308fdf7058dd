"""`--model` on an encoder-decoder (T5, BART, Marian): one of its three attentions as a MODEL Result.

    run SOURCE --target TEXT:  the encoder reads SOURCE; the decoder reads decoder_start_token_id, then TEXT's
    ids (teacher-forced); --attention encoder (n x n), decoder (m x m, causal) or cross (m x n: Q from the
    decoder's stream X, K and V from the encoder's output Y) picks what the views show.
    generate SOURCE:  greedy writing; each written token's cross-attention row over the source (the alignment).

The Result's export extras carry all three (ids, decoder_ids, encoder_attentions, decoder_attentions,
cross_attentions: transformers' names).
"""

from __future__ import annotations

import numpy as np

from qkv_cli.core import budget
from qkv_cli.core.masks import MaskSpec, additive
from qkv_cli.core.result import GenerationResult, LayerResult, ModelResult, Result
from qkv_cli.errors import QkvError
from qkv_cli.text.tokens import decode

HINTS = "fewer --layer, --dtype float32, or a shorter source or target"


def check_model(model, target, attention) -> None:
    """--target and --attention need an encoder-decoder checkpoint: a decoder-only or encoder model refuses them."""
    if model.is_encoder_decoder:
        return
    flag = "--target" if target is not None else f"--attention {attention}"
    raise QkvError(f"{flag} needs an encoder-decoder model (t5, bart, marian): {model.name} is a "
                   f"{model.config.family} model with self-attention only")  # fmt: skip


def check_options(model, req) -> None:
    """What an encoder-decoder run does not do is refused, never ignored: a chat template, next-token predictions,
    sampling (its writing is greedy)."""
    read, g = req.readout, req.generation
    given = [flag for flag, on in (("--chat", req.inputs.chat is not None), ("--predict", read.predict),
             ("--logit-lens", read.logit_lens), ("--temperature", g.temperature > 0), ("--top-k", g.top_k > 0))
             if on]  # fmt: skip
    if given:
        raise QkvError(f"{given[0]} is not available for an encoder-decoder ({model.name}): it runs SOURCE with "
                       "--target teacher-forced, or writes greedily with qkv generate")  # fmt: skip


def tokens_of(model, text: str):
    from qkv_cli.text.tokens import encode

    return encode(model.tokenizer, text, add_special_tokens=True)


def decoder_tokens(model, target: str | None):
    """decoder_start_token_id, then the target's ids (with the tokenizer's own end token)."""
    from qkv_cli.text.tokens import Tokens

    start = model.start_id
    label = model.tokenizer.id_to_token(start) or str(start)
    t = tokens_of(model, target) if target else Tokens(strings=(), labels=(), offsets=(), ids=())
    model.check_decoder([start, *t.ids])
    return Tokens(strings=(label, *t.strings), labels=(label, *t.labels), offsets=((0, 0), *t.offsets),
                  ids=(start, *t.ids))  # fmt: skip


def estimate(model, n: int, m: int) -> int:
    c = model.config
    item = model.dtype.itemsize
    heads = c.n_layers * c.n_heads * n * n + model.dec_layers * model.dec_heads * (m * m + m * n)
    return item * (3 * heads + 8 * (n + m) * (c.d + c.d_ff))


def run(model, source: str, target: str | None, attention: str = "cross", layers=None, all_layers=False,
        settings=None, max_memory=None, output=None) -> Result:  # fmt: skip
    """The teacher-forced pass; `attention` chooses what the Result's attentions and layers hold. output:
    core.output_size.Output, the JSON or CSV to print: refused above its limit before the pass."""
    from qkv_cli.models.encdec_model import check_side
    from qkv_cli.pipeline.checkpoint import chosen_layers
    from qkv_cli.pipeline.output_plan import check_encdec

    check_side(attention)
    src = model.tokenize(source)
    dec = decoder_tokens(model, target)
    limit = budget.default_max_memory() if max_memory is None else max_memory
    budget.check_budget(model.weights_bytes + estimate(model, len(src), len(dec)), limit, HINTS, dtype=model.dtype)
    L = model.n_layers(attention)
    chosen = chosen_layers(_Sized(model, L), layers, all_layers)
    check_encdec(output, model, src, dec, attention, chosen, bool(layers))
    seq = model.teacher_forced(src.ids, dec.ids)
    ablation = None
    if settings is not None and settings.ablate is not None:
        ablated = model.teacher_forced(src.ids, dec.ids, change=ablate_in(attention, set(chosen), settings))
        ablation = report(getattr(seq, attention)[chosen[0]], getattr(ablated, attention)[chosen[0]], settings)
        seq = ablated
    parts = getattr(seq, attention)
    queries = src if attention == "encoder" else dec
    keys = src if attention != "decoder" else dec
    details = {l: layer_result(model, attention, l, parts[l], queries, keys, ablation) for l in chosen}
    return ModelResult(
        tokens=queries, context=src if attention == "cross" else None, kernel="vectorized",
        model=model.info(None, attention), layers=details, attentions=np.stack([a.weights for a in parts]),
        ids=np.asarray(src.ids, dtype=np.int64), last_hidden_state=seq.decoder_output,
        layer_types=(f"{attention}_attention",) * L, layer_rules=(model.rules(attention),) * L, ablation=ablation,
        encdec=extras(seq, src, dec),
    )  # fmt: skip


class _Sized:  # what chosen_layers reads: config.n_layers of the chosen attention's stack
    def __init__(self, model, L):
        self.config = type("C", (), {"n_layers": L})()


def extras(seq, src, dec) -> dict:
    return {"decoder_ids": [int(i) for i in dec.ids], "source_labels": list(src.labels),
            "decoder_labels": list(dec.labels),
            "encoder_attentions": np.stack([a.weights for a in seq.encoder]),
            "decoder_attentions": np.stack([a.weights for a in seq.decoder]),
            "cross_attentions": np.stack([a.weights for a in seq.cross]),
            "encoder_last_hidden_state": seq.encoder_output}  # fmt: skip


def ablate_in(attention: str, layers: set, settings):
    """--ablate q|k|v on the chosen layers of one attention (pipeline.ablate: zeros or seeded noise)."""
    from qkv_cli.pipeline.ablate import apply

    def change(which, layer, Q, K, V):
        return apply(Q, K, V, settings) if which == attention and layer in layers else (Q, K, V)

    return change


def report(intact, ablated, settings) -> dict:
    from qkv_cli.pipeline.ablate import max_change

    names = ("Q", "K", "V", "weights", "heads", "output")
    change = {k: max_change(getattr(intact, k), getattr(ablated, k)) for k in names}
    return {"target": settings.ablate.upper(), "with": settings.ablate_with, "max_change": change}


def layer_result(model, attention: str, l: int, parts, queries, keys, ablation) -> Result:
    from qkv_cli.core.numerics import scaled_scores

    w = model.layer_weights(l, attention)
    m, n = parts.weights.shape[1:]
    scale = model.params.options.scale
    scale = 1 / np.sqrt(parts.Q.shape[-1]) if scale is None else scale
    scores = scaled_scores(parts.Q, parts.K, scale)
    if parts.bias is not None:
        scores = scores + parts.bias  # T5: the relative position bias is part of the score
    mask = additive(MaskSpec(causal=attention == "decoder"), m, n, parts.Q.dtype)
    return LayerResult(
        tokens=queries, scale=float(scale), H=parts.H, Wq=w["Wq"], Wk=w["Wk"], Wv=w["Wv"],
        Q=parts.Q, K=parts.K, V=parts.V, scores=scores,
        mask=np.zeros((m, n), parts.Q.dtype) if mask is None else mask,
        weights=parts.weights, heads=parts.heads, Wo=w["Wo"], output=parts.output, rules=model.rules(attention),
        bq=w["bq"], bk=w["bk"], bv=w["bv"], bo=w["bo"], model=model.info(l, attention), ablation=ablation,
        context=keys if attention == "cross" else None, H_context=parts.Y if attention == "cross" else None,
    )  # fmt: skip


def generate(model, source: str, max_new: int, max_memory=None) -> Result:
    """Greedy writing from SOURCE: a GENERATION Result whose rows are each written token's cross-attention."""
    from qkv_cli.text.tokens import Tokens

    src = model.tokenize(source)
    limit = budget.default_max_memory() if max_memory is None else max_memory
    budget.check_budget(model.weights_bytes + estimate(model, len(src), max_new + 1), limit, HINTS,
                        dtype=model.dtype, given=("fewer --layer",))  # fmt: skip
    ids, probs, rows = model.generate(src.ids, max_new, eos=model.config.eos)
    tok = model.tokenizer
    labels = tuple(tok.id_to_token(int(i)) or str(int(i)) for i in ids)
    written = Tokens(strings=labels, labels=labels, offsets=((0, 0),) * len(ids), ids=tuple(int(i) for i in ids))
    return GenerationResult(
        tokens=written, context=src, model=model.info(None, "cross"), step_ids=ids,
        step_probs=probs, step_attentions=rows, ids=np.asarray(src.ids, dtype=np.int64),
        text=decode(tok, ids, skip_special_tokens=True),
    )  # fmt: skip
