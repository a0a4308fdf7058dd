"""Token-to-token attribution beyond the raw weights: how much key j moves query i (qkv attribute, heatmap --method).

- rollout (Abnar & Zuidema 2020): per layer A_l = 0.5 fuse_h(alpha_l) + 0.5 I, rows renormalised (the residual
  stream carries the token itself), and R = A_L ... A_1 A_0 up to layer L: weights on the input tokens, not on the
  mixtures that the layer's keys already are.
- value-norm (Kobayashi et al. 2020): f^h(x) = (x W^h_v + b^h_v) W^h_o (the head's rows of W^o); per head
  ||alpha^h_ij f^h(x_j)|| = alpha^h_ij ||f^h(x_j)||, and for the layer ||sum_h alpha^h_ij f^h(x_j)||: a large weight
  on a value vector that is nearly zero moves nothing.
- value-zeroing (Mohebbi et al. 2023): zero key j's value vector in every head, rerun layer L, and score
  1 - cos(y_i, y_i without j) for every query i; negative scores (rounding) are clipped to 0 and each row is
  normalised to sum to 1. One extra pass of the layer per key: the memory it needs is checked first.

The Result (kind ATTRIBUTION) is the layer's own Result (its H, V, weights, mask ...) plus `method`, `attribution`
(m, n), `attribution_heads` (tau, m, n; value-norm only), `value_norms` (tau, n), `head_fusion` and `cost`.
"""

from __future__ import annotations

import numpy as np

from qkv_cli.core import budget
from qkv_cli.core.gqa import kv_heads_of
from qkv_cli.core.result import Result, attributed
from qkv_cli.errors import QkvError
from qkv_cli.pipeline.request import FUSIONS, METHODS  # the choices (NumPy-free there, for the CLI's options)

HINTS = "a shorter text, --dtype float32, or --method value-norm (one pass)"
ONE_PASS = "--method value-norm (one pass)"  # never offered to a value-norm run (a hint never repeats an option)
CHUNK_BYTES = 32 * 2**20  # value-norm: the (rows, n, d) sums of one block of queries


def fuse(weights, how: str = "mean"):  # [tau, m, n] -> [m, n]
    if how not in FUSIONS:
        raise QkvError(f"unknown --head-fusion {how!r}: choose one of {', '.join(FUSIONS)}")
    return {"mean": np.mean, "max": np.max, "min": np.min}[how](np.asarray(weights, dtype=np.float64), axis=0)


def residual_step(fused):  # [m, m] -> [m, m]: A = 0.5 alpha + 0.5 I, each row renormalised to sum to 1
    A = 0.5 * fused + 0.5 * np.eye(fused.shape[-1])
    return A / A.sum(axis=-1, keepdims=True)


def rollout(attentions, upto: int, how: str = "mean"):  # [L, tau, m, m] -> [m, m] R = A_upto ... A_1 A_0
    R = np.eye(attentions.shape[-1])
    for layer in range(upto + 1):
        R = residual_step(fuse(attentions[layer], how)) @ R  # (m, m) x (m, m): layer l mixes what l - 1 gave it
    return R


def value_vectors(V, Wo):  # [G, n, d_k], [tau d_k, d] -> [tau, n, d]: f^h(x_j) = (x_j W^h_v + b^h_v) W^h_o
    G, n, dk = V.shape
    tau = Wo.shape[0] // dk
    Wo_h = np.asarray(Wo, dtype=np.float64).reshape(tau, dk, -1)  # head h's rows of W^o: (tau, d_k, d)
    return np.einsum("hnk,hkd->hnd", np.asarray(V, dtype=np.float64)[kv_heads_of(tau, G)], Wo_h)


def value_norms(weights, F):  # [tau, m, n], [tau, n, d] -> ([m, n] layer, [tau, m, n] per head, [tau, n] ||f||)
    """||sum_h alpha^h_ij f^h(x_j)|| for the layer; alpha^h_ij ||f^h(x_j)|| per head; ||f^h(x_j)||."""
    w = np.asarray(weights, dtype=np.float64)
    tau, m, n = w.shape
    norms = np.linalg.norm(F, axis=-1)  # (tau, n)
    layer = np.empty((m, n))
    rows = max(1, CHUNK_BYTES // max(1, 8 * n * F.shape[-1]))
    for start in range(0, m, rows):
        part = np.einsum("hin,hnd->ind", w[:, start : start + rows], F)  # (rows, n, d): sum over heads
        layer[start : start + rows] = np.linalg.norm(part, axis=-1)
    return layer, w * norms[:, None, :], norms


def zeroing_scores(y, y_without):  # [m, d], [m, d] -> [m]: 1 - cos(y_i, y_i without key j)
    y, z = np.asarray(y, dtype=np.float64), np.asarray(y_without, dtype=np.float64)
    dot = (y * z).sum(axis=-1)
    size = np.linalg.norm(y, axis=-1) * np.linalg.norm(z, axis=-1)
    cos = np.divide(dot, size, out=np.ones_like(dot), where=size > 0)
    return np.where((y == z).all(axis=-1), 0.0, np.maximum(1.0 - cos, 0.0))  # unchanged: exactly 0, not 1e-16


def normalise_rows(S):  # [m, n] -> [m, n], each row summing to 1 (a row of zeros stays zeros)
    total = S.sum(axis=-1, keepdims=True)
    return np.divide(S, total, out=np.zeros_like(S), where=total > 0)


def value_zeroing(model, x, layer: int, kernel: str = "vectorized"):  # [m, d] layer input -> [m, m]
    """Column j: the layer rerun with key j's value vector zeroed in every head, scored against the intact output."""
    y, _ = model.layer_output(layer, x, kernel)
    m = x.shape[0]
    S = np.zeros((m, m))
    for j in range(m):
        y_without, _ = model.layer_output(layer, x, kernel, zero_value=j)
        S[:, j] = zeroing_scores(y, y_without)
    return normalise_rows(S)


def layer_pass_bytes(config, m: int, itemsize: int) -> int:
    """One extra pass of a layer (value zeroing): its Q, K, V, scores, weights, the feed-forward, the outputs, and
    one weight-sized temporary (measured with tracemalloc on MiniLM: 2.9 MB at m = 30 in float64; this gives 3.0)."""
    qkv = (config.n_heads + 2 * config.G) * config.d_k
    return itemsize * (3 * config.n_heads * m * m + m * (qkv + 2 * max(config.d_ff, qkv)) + 6 * m * config.d
                       + config.d * config.d)  # fmt: skip


def check(req) -> None:
    """The options, before any text is read or weights loaded."""
    method = req.attribution.method  # a choice of METHODS (pipeline.request.Attribution checks it)
    if method is None:
        raise QkvError("an attribution needs --method: choose one of " + ", ".join(METHODS))
    if len(set(req.keep.layers)) > 1:
        raise QkvError(f"--method {method} attributes one layer: give one --layer")
    if req.checkpoint.name is None and method != "value-norm":
        why = ("multiplies the attention of every layer" if method == "rollout"
               else "reruns a whole layer (residual, norm and feed-forward)")  # fmt: skip
        raise QkvError(f"--method {method} needs --model: it {why}, and random weights have one attention layer; "
                       "--method value-norm works on random weights")  # fmt: skip
    if req.inputs.batch or req.generation.tokens:
        other = "--batch" if req.inputs.batch else "--generate"
        raise QkvError(f"--method {method} cannot be combined with {other}")


def attributed_heads(method: str, head, heads) -> list[int]:
    """--head with an attribution: its heads (value-norm has per-head attributions), or none when not given."""
    if head and method != "value-norm":
        raise QkvError(f"--head: --method {method} has no per-head attribution (only value-norm has one); drop --head")
    return list(heads) if head else []


def of_layer(result: Result, req) -> Result:
    """value-norm of a random-weights layer (SEEDED): f^h(x_j) = x_j W^h_v W^h_o (no biases)."""
    limit = budget.default_max_memory() if req.limits.max_memory is None else req.limits.max_memory
    tau, m, n = result.weights.shape
    budget.check_budget(8 * (tau * n * result.d + 2 * tau * m * n) + CHUNK_BYTES, limit, HINTS, what="value-norm",
                        dtype=req.settings.dtype, given=(ONE_PASS,))  # fmt: skip
    layer, heads, norms = value_norms(result.weights, value_vectors(result.V, result.Wo))
    ids = None if result.tokens.ids is None else np.asarray(result.tokens.ids)
    return attributed(result, method="value-norm", attribution=layer, attribution_heads=heads, value_norms=norms,
                      ids=ids)  # fmt: skip


def of_model(model, text: str, req) -> Result:
    """rollout, value-norm or value-zeroing of layer --layer (default the last) of a checkpoint, on `text`."""
    from qkv_cli.models import estimate_bytes
    from qkv_cli.pipeline.chat import prompt
    from qkv_cli.pipeline.checkpoint import check_memory, chosen_layers

    c, kernel = model.config, req.settings.kernel
    L = chosen_layers(model, req.keep.layers, False)[0]
    said = prompt(model, text, req.inputs.chat)
    tokens = said.tokens
    m, item = len(tokens), model.dtype.itemsize
    extra = {"rollout": 16 * m * m, "value-norm": 8 * (c.n_heads * m * c.d + 2 * c.n_heads * m * m) + CHUNK_BYTES,
             "value-zeroing": layer_pass_bytes(c, m, item) + 16 * m * m}[req.attribution.method]  # fmt: skip
    needed = estimate_bytes(c, m, model.dtype, 1) + extra
    limit = budget.default_max_memory() if req.limits.max_memory is None else req.limits.max_memory
    check_memory(
        model,
        needed,
        limit,
        HINTS,
        what=f"--method {req.attribution.method}",
        given=(ONE_PASS,) if req.attribution.method == "value-norm" else (),
    )  # the weights counted too, as run's
    run = model.forward(np.asarray(tokens.ids, dtype=np.int64), layers=[L], kernel=kernel, tokens=tokens)
    out = attributed(
        run.layers[L], method=req.attribution.method, ids=run.ids, chat=said if req.inputs.chat is not None else None
    )
    if req.attribution.method == "rollout":
        out.head_fusion = req.attribution.head_fusion or "mean"
        out.attribution = rollout(run.attentions, L, out.head_fusion)
    elif req.attribution.method == "value-norm":
        out.attribution, out.attribution_heads, out.value_norms = value_norms(out.weights, value_vectors(out.V, out.Wo))
    else:
        out.cost = {"passes": m + 1, "bytes": int(needed), "layer_pass_bytes": layer_pass_bytes(c, m, item)}
        out.attribution = value_zeroing(model, run.hidden_states[L], L, kernel)
    return out
