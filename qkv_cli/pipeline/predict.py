"""Next-token predictions of a decoder: at every position, the k most probable next tokens, from the output head
(`--predict`); and the logit lens (`--logit-lens`): the same read out after every layer (final norm, then the head),
to see at which layer a prediction forms."""

from __future__ import annotations

import numpy as np

from qkv_cli.core.numerics import softmax
from qkv_cli.core.stats import top_indices
from qkv_cli.errors import QkvError

TOP = 5


def top_k(z, k: int = TOP):  # [m, V] scores -> ([m, k] ids, [m, k] probabilities), most probable first
    p = softmax(np.asarray(z, dtype=np.float64))
    ids = top_indices(p, k)
    return ids, np.take_along_axis(p, ids, axis=-1)


def predict(model, run, lens: bool = False, k: int = TOP) -> dict:
    """{"ids", "probs"} (m, k) from the last layer; with lens, "lens_ids", "lens_probs" (L, m, k) per layer."""
    fam, p, c = model.family, model.params, model.config
    z = fam.logits(p, c, run.last_hidden_state)
    if z is None:
        raise QkvError(f"--predict needs a decoder: {model.name} is an encoder ({c.family}) with no output head")
    out = dict(zip(("ids", "probs"), top_k(z, k), strict=True))
    out["labels"] = labels(model, out["ids"])
    if lens:
        normed = [fam.final(p, c, h) for h in run.hidden_states[1:-1]] + [run.last_hidden_state]  # the last is normed
        per_layer = [top_k(fam.logits(p, c, h), k) for h in normed]
        out["lens_ids"] = np.stack([ids for ids, _ in per_layer])
        out["lens_probs"] = np.stack([probs for _, probs in per_layer])
        out["lens_labels"] = [labels(model, ids) for ids in out["lens_ids"]]
    return out


def labels(model, ids) -> list[list[str]]:
    """Display labels of vocabulary ids (m, k), as `run` labels tokens."""
    from qkv_cli.text.tokens import label_of

    tok = model.tokenizer
    return [[label_of(tok, tok.id_to_token(int(i)) or f"<{int(i)}>") for i in row] for row in ids]
