"""What the page of a scan holds (`qkv scan --page`): the layer x head grid of one score's mean, and for every head
its top texts (summary.json's top 5) with that head's attention on each, from the model run again on those texts
only (batched as the scan ran them)."""

from __future__ import annotations

import numpy as np

from qkv_cli.errors import QkvError

MAX_TEXTS = 2000  # distinct top texts a page reruns (a model of 2,000 heads has at most 10,000: refused beyond)


def page_data(model, plan, summary: dict, score: str) -> dict:
    """The page's document: model, score, grid (L x tau means), texts {text_id: tokens}, heads {"l,j": [[text_id,
    value, weights (m x m, 3 decimals)], ...]}."""
    from qkv_cli.pipeline.scan.block import forward, tokenized
    from qkv_cli.text.corpus import records

    s = summary["scores"][score]
    wanted = sorted({t for row in s["top"] for head in row for t, _ in head})
    if len(wanted) > MAX_TEXTS:
        raise QkvError(f"the page would rerun {len(wanted):,} texts (at most {MAX_TEXTS:,}): scan a smaller model")
    chosen = [r for r in records(plan.corpus, plan.field, plan.limit) if r.text_id in set(wanted)]
    items, _, _ = tokenized(model, plan, chosen)
    runs = dict(zip([t for t, _ in items], forward(model, plan, items), strict=True))
    tokens = {t: list(tok.labels) for t, tok in items}
    heads = {}
    for l, row in enumerate(s["top"]):
        for j, top in enumerate(row):
            heads[f"{l},{j}"] = [[t, v, np.round(runs[t].attentions[l, j], 3).tolist()] for t, v in top if t in runs]
    return {"model": summary["model"], "corpus": summary["corpus"], "score": score, "texts_scanned": summary["texts"],
            "grid": s["mean"], "texts": {str(t): v for t, v in tokens.items()}, "heads": heads}  # fmt: skip
