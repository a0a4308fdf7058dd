"""The page of an encoder-decoder run (`qkv view SOURCE --model T5|BART|MARIAN --target TEXT`): its three attentions,
with a switch between them.

    encoder   n x n   source over source, nothing masked      L_enc layers, tau_enc heads
    decoder   m x m   target over target, causal              L_dec layers, tau_dec heads
    cross     m x n   target (Q from X) over source (K, V from the encoder's output Y)

Each attention is one "sentence" of the page with its own "meta" (L, tau, layer names, token titles), which the
page applies when the switch picks it. The attention the run chose (--attention, default cross) is shown first and
keeps its scores on the layers it kept in detail; the other two store their weights.
"""

from __future__ import annotations

import numpy as np

from qkv_cli.views.page import data as html_data

ORDER = ("encoder", "decoder", "cross")
TITLES = {
    "encoder": ["source tokens (queries)", "source tokens (keys)"],
    "decoder": ["target tokens (queries)", "target tokens (keys, causal)"],
    "cross": ["target tokens (Q from X, the decoder's stream)", "source tokens (K, V from Y, the encoder's output)"],
}
NAMES = {"encoder": "encoder self-attention (source x source)", "decoder": "decoder self-attention (target x target, "
         "causal)", "cross": "cross-attention (target x source)"}  # fmt: skip


def _stats(attention: str, weights, masked, ids, labels) -> dict:
    from qkv_cli.core.stats import head_summary
    from qkv_cli.views.page.stats import CROSS_COLUMNS, _roles, _table

    if attention != "cross":
        return _roles([weights], None, [ids], [labels])
    grid = [head_summary(w, live_rows=~masked.all(axis=1), cross=True) for w in weights]
    return _table(grid, CROSS_COLUMNS, False, "cross-attention: keys are the source tokens, queries the target's, "
                  "so distance, self, previous and first token (and the roles built on them) do not apply")  # fmt: skip


def _sentence(run, attention: str) -> dict:
    extra, info = run.encdec, run.model
    weights = np.asarray(extra[f"{attention}_attentions"])  # (L, tau, m, n)
    L, tau, m, n = weights.shape
    src, dec = extra["source_labels"], extra["decoder_labels"]
    queries = src if attention == "encoder" else dec
    keys = dec if attention == "decoder" else src
    masked = np.triu(np.ones((m, n), bool), 1) if attention == "decoder" else np.zeros((m, n), bool)
    chosen = attention == info.layer_type.removesuffix("_attention")
    detail = sorted(run.layers) if chosen else []
    compact = weights.size > html_data.COMPACT_CELLS
    layers = [html_data.layer(weights[l], run.layers[l].scores if l in detail else None, masked, compact)
              for l in range(L)]  # fmt: skip
    ids = extra["decoder_ids"] if attention != "encoder" else [int(i) for i in run.ids]
    out = html_data.sentence(NAMES[attention], queries, keys, layers, [masked] * L,
                             _stats(attention, weights, masked, ids, queries))  # fmt: skip
    mask = "causal" if attention == "decoder" else "nothing masked"
    line = (f"{info.name} ({info.family}) {attention}: L={L} tau={tau} m={m} n={n} {mask}; source "
            f"{len(src)} tokens, target {len(dec)} (the decoder's start token, then the target)")  # fmt: skip
    out["meta"] = {"L": L, "tau": tau, "G": tau, "kv": list(range(tau)), "layerNames": [str(l) for l in range(L)],
                   "detail": detail, "cross": attention == "cross", "titles": TITLES[attention],
                   "run": html_data.label(line), "noScores": None if chosen else f"score: not kept for the {attention} "
                   f"attention (qkv view --attention {attention} keeps its scores)"}  # fmt: skip
    return out


def encdec_page(run) -> dict:
    """page_data's doc (less its shared keys) for a MODEL Result of pipeline.encdec.run.run."""
    sentences = [_sentence(run, a) for a in ORDER]
    first = ORDER.index(run.model.layer_type.removesuffix("_attention"))
    meta = sentences[first]["meta"]
    notes = [
        "An encoder-decoder: the Attention switch above picks the encoder's self-attention (source over source), "
        "the decoder's (target over target, causal) or the cross-attention (Q from the decoder's stream X, K and V "
        "from the encoder's output Y: target rows, source columns).",
    ]
    return {"title": f"{run.model.name}: encoder, decoder and cross-attention", **meta, "sentences": sentences,
            "startSentence": first, "switchLabel": "Attention", "notes": notes}  # fmt: skip


def generation_page(gen, layer: int | None = None) -> dict:
    """page_data's doc for an encoder-decoder's writing (pipeline.encdec.run.generate): row t is the token written at
    step t, its weights the cross-attention of the query that wrote it over the source; every layer and head."""
    steps, L, tau, n = gen.step_attentions.shape
    line = (f"{gen.model.name} ({gen.model.family}) decoder L={L} tau={tau}: wrote {steps} tokens greedily from a "
            f"source of {n} tokens (the encoder's keys and values once, the decoder's in a KV cache)")  # fmt: skip
    notes = ["An encoder-decoder writing: row t is the token written at step t; its weights are the cross-attention "
             "of the query that wrote it (Q from the decoder's stream X) over the source tokens (K and V from the "
             "encoder's output Y): the alignment.", html_data.label("Written: " + gen.text[:300])]  # fmt: skip
    return {"title": f"{gen.model.name}: what each written token read in the source", "run": line, "L": L, "tau": tau,
            "G": tau, "kv": list(range(tau)), "layerNames": [str(l) for l in range(L)], "detail": [],
            "start": L - 1 if layer is None else layer % L, "cross": True, "notes": notes,
            "titles": ["written tokens (queries)", "source tokens (keys and values: the encoder's output)"],
            "noScores": "score: not kept (a generation keeps the weights of each step only)",
            "sentences": [html_data.generation_sentence(gen)]}  # fmt: skip
