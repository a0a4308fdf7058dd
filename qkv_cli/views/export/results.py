"""NPZ / JSON / CSV views of a Result, by kind. Files go through views.export.writing: written whole or not at all."""

from __future__ import annotations

import csv
import io
import json

import numpy as np

from qkv_cli.core.gqa import kv_head_of
from qkv_cli.core.result import Kind, Result

SCHEMA = ("tokens", "H", "Wq", "Wk", "Wv", "Q", "K", "V", "scores", "mask", "weights", "heads", "Wo", "output")
SHOW_NAMES = {"q": "Q", "k": "K", "v": "V", "scores": "scores", "mask": "mask", "weights": "weights",
              "output": "output", "heads": "heads", "h": "H"}  # fmt: skip
# a checkpoint's arrays beside the matrix they belong to, present only where the family has them: RoPE's inputs
# and the biases (Q = H Wq + bq, output = concat(heads) Wo + bo); the NPZ holds them all, JSON those beside --show
BESIDE = {"Q": ("Q_pre_rope", "bq"), "K": ("K_pre_rope", "bk"), "V": ("bv",), "output": ("bo",)}
FAMILY_ARRAYS = tuple(name for names in BESIDE.values() for name in names)


def checkpoint_extras(run: Result) -> dict:
    """What a checkpoint run exports under the same names in NPZ and JSON, beside the chosen layers' matrices:
    the token ids (m,), the kept layers' weights (L_kept, tau_kept, rows, m: every layer, head and query unless
    the budget, --head or --rows kept fewer), which layers (attention_layers), heads (attention_heads) and query
    positions (rows) those are, every
    layer's kind (L,), the last hidden state (m, d), and the scalars G and d_k; with attention sinks (gpt-oss)
    `sinks`, the sink's share of each row (1 - row sum), shaped like attentions without its last axis."""
    first = run.first_layer()
    L, m = len(run.layer_types), len(run.ids)
    kept = list(range(L)) if run.attention_layers is None else [int(x) for x in run.attention_layers]
    tau = run.attentions.shape[1]
    heads = list(range(tau)) if run.attention_heads is None else [int(x) for x in run.attention_heads]
    rows = list(range(m)) if run.rows is None else [int(x) for x in run.rows]
    return {"ids": [int(i) for i in run.ids], "attentions": run.attentions, "attention_layers": kept,
            "attention_heads": heads, "rows": rows, "layer_types": list(run.layer_types),
            "last_hidden_state": run.last_hidden_state, "kv_heads": first.G, "head_dim": first.d_k,
            **(run.encdec or {}), **_routing(run),
            **({} if run.sinks is None else {"sinks": run.sinks})}  # fmt: skip


def _routing(run: Result) -> dict:
    """A mixture of experts' router_top (L, m, k) expert indices, best first, and router_weights (L, m, k); a
    dense layer's rows are -1 and 0."""
    if run.router_top is None:
        return {}
    return {"router_top": run.router_top.tolist(), "router_weights": run.router_weights}  # indices: JSON ints


def layer_arrays(result: Result) -> dict:
    """One attention layer (SEEDED or LAYER): the export schema, plus what the run adds (context, biases, RoPE)."""
    out = {"tokens": np.array(list(result.tokens.strings), dtype=str), "labels": np.array(result.labels, dtype=str)}
    for name in SCHEMA[1:]:
        out[name] = getattr(result, name)
    out.update(d=np.int64(result.d), tau=np.int64(result.tau), scale=np.float64(result.scale))
    if result.settings is not None:
        out["seed"] = np.int64(result.settings.seed)
    out["kernel"] = np.array(result.kernel)
    if result.is_cross:
        out["context_tokens"] = np.array(list(result.context.strings), dtype=str)
        out["context_labels"] = np.array(result.key_labels, dtype=str)
        out["H_context"] = result.H_context
    for name in FAMILY_ARRAYS:
        if getattr(result, name) is not None:
            out[name] = getattr(result, name)
    if result.sink_logits is not None:  # gpt-oss: the layer's sink logit per head (tau,)
        out["sink_logits"] = result.sink_logits
    return out


def model_arrays(run: Result) -> dict:
    """A checkpoint run: the first chosen layer's schema, and every layer's attention weights."""
    first = run.first_layer()
    out = layer_arrays(first)
    info = first.model
    out.update(layer=np.int64(info.layer), n_layers=np.int64(info.n_layers), model=np.array(info.name))
    for name, value in checkpoint_extras(run).items():  # in the NPZ: int64 scalars and ids, the kinds as str
        out[name] = np.int64(value) if isinstance(value, int) else np.asarray(value)
    for name, key in (("ids", "predict_ids"), ("probs", "predict_probs"), ("lens_ids", "lens_ids"),
                      ("lens_probs", "lens_probs")):  # fmt: skip
        if run.predictions is not None and name in run.predictions:
            out[key] = run.predictions[name]
    return out


def band_arrays(result: Result) -> dict:
    """A long document's band: the core schema without the m x m matrices, plus weights_band and band_keys."""
    s = result.settings
    return {
        "tokens": np.array(list(result.tokens.strings), dtype=str), "labels": np.array(result.labels, dtype=str),
        "H": result.H, "Wq": result.Wq, "Wk": result.Wk, "Wv": result.Wv, "Q": result.Q, "K": result.K,
        "V": result.V, "weights_band": result.band, "band_keys": result.band_keys, "heads": result.heads,
        "Wo": result.Wo, "output": result.output, "d": np.int64(s.d), "tau": np.int64(s.tau),
        "scale": np.float64(result.scale), "seed": np.int64(s.seed), "kernel": np.array("banded"),
        "window": np.int64(result.band.shape[-1]),
    }  # fmt: skip


def batch_arrays(batch: Result) -> dict:
    """The export schema with a leading batch axis B on every per-sentence matrix (padded to L), plus `lengths`
    (B,) and `padding` (B, L) (True = pad). Weights Wq, Wk, Wv, Wo and the scalars are shared."""
    per = [layer_arrays(r) for r in batch.padded]
    shared = ("Wq", "Wk", "Wv", "Wo", "d", "tau", "scale", "seed", "kernel")
    out = {k: per[0][k] for k in shared}
    for k in per[0]:
        if k not in shared:
            out[k] = np.stack([p[k] for p in per])
    out["lengths"] = np.array(batch.lengths, dtype=np.int64)
    out["padding"] = np.stack([r.rules.padding for r in batch.padded])
    return out


ARRAYS = {Kind.SEEDED: layer_arrays, Kind.LAYER: layer_arrays, Kind.MODEL: model_arrays, Kind.BAND: band_arrays,
          Kind.BATCH: batch_arrays}  # fmt: skip


def arrays(result: Result) -> dict:
    """What --save-npz writes for any Result."""
    return ARRAYS[result.kind](result)


def settings_dict(result: Result) -> dict:
    """The JSON `settings`: the random-weights options, or what a checkpoint fixed."""
    if result.model is not None:
        info = result.model
        return {"d": result.d, "tau": result.tau, "d_k": result.d_k, "kernel": result.kernel,
                "causal": info.causal, "scale": result.scale, "dtype": result.dtype, "name": info.name,
                "family": info.family, "layer": info.layer, "layers": info.n_layers, "kv_heads": result.G,
                "layer_type": info.layer_type, "window": info.window, "rope": info.rope,
                "chunk": getattr(result.rules, "chunk", None)}  # fmt: skip
    s = result.settings
    return {
        "d": s.d, "tau": s.tau, "d_k": s.d_k, "seed": s.seed, "kernel": s.kernel, "causal": s.causal_mask,
        "window": s.window, "chunk": s.chunk, "scale": result.scale, "scale_option": s.scale, "positions": s.positions,
        "projection": s.projection, "dtype": s.dtype, "tokenizer": s.tokenizer, "kv_heads": s.G,
        "ablate": s.ablate, "ablate_with": s.ablate_with,
    }  # fmt: skip


def jsonable(x):
    """Arrays to nested lists; -inf (masked) and NaN become null, since JSON has neither."""
    arr = np.asarray(x, dtype=np.float64)
    if not arr.size:
        return arr.tolist()
    return np.where(np.isfinite(arr), arr, np.nan).tolist() if arr.ndim else float(arr)


def nan_to_null(obj):
    if isinstance(obj, float) and obj != obj:
        return None
    if isinstance(obj, list):
        return [nan_to_null(v) for v in obj]
    return obj


JSON_PIECE = 1 << 16  # an array of more numbers (2-D or more) is written row by row, a 1-D one always whole


def write_json(obj, out) -> None:
    """json.dumps(obj) written piece by piece: arrays of more than JSON_PIECE numbers row by row (-inf and NaN as
    null), so a document of every matrix of a long text never exists whole in memory. The same text as json.dumps."""
    if isinstance(obj, np.ndarray):
        if obj.size <= JSON_PIECE or obj.ndim <= 1:
            arr = np.asarray(obj, dtype=np.float64)
            finite = np.isfinite(arr).all()  # then json's C encoder does it all (the null pass is Python per number)
            out.write(json.dumps(arr.tolist() if finite else nan_to_null(jsonable(arr)), allow_nan=False))
            return
        out.write("[")
        for i, row in enumerate(obj):
            if i:
                out.write(", ")
            write_json(row, out)
        out.write("]")
    elif isinstance(obj, dict):
        out.write("{")
        for i, (key, value) in enumerate(obj.items()):
            out.write(", " if i else "")
            out.write(json.dumps(str(key)) + ": ")
            write_json(value, out)
        out.write("}")
    elif isinstance(obj, list | tuple) and any(isinstance(v, dict | np.ndarray | list) for v in obj):
        out.write("[")
        for i, value in enumerate(obj):
            out.write(", " if i else "")
            write_json(value, out)
        out.write("]")
    else:
        out.write(json.dumps(obj, allow_nan=False))


def json_doc(result: Result, show, heads) -> dict:
    """One attention layer as JSON: tokens, settings, the matrices named by --show for the heads shown."""
    doc = {
        "tokens": list(result.tokens.strings),
        "labels": result.labels,
        "settings": settings_dict(result),
        "heads_shown": list(heads),
        "fully_masked_queries": [int(i) for i in result.empty_rows.nonzero()[0]],  # their weights are all 0
        "matrices": {},
    }
    if result.is_cross:
        doc["context_tokens"] = result.key_labels
    if result.ablation is not None:
        doc["ablation"] = result.ablation
    if result.model is not None:
        m = result.model
        doc["model"] = {"name": m.name, "family": m.family, "layer": m.layer, "layers": m.n_layers}
    for name in show:
        key = SHOW_NAMES[name]
        arr = getattr(result, key)
        if key in ("Q", "scores", "weights", "heads"):
            arr = arr[list(heads)]
        doc["matrices"][key] = arr  # written row by row (write_json)
        for extra in BESIDE.get(key, ()):  # RoPE's input and the bias, where the family has them
            if getattr(result, extra) is not None:
                value = getattr(result, extra)
                doc["matrices"][extra] = value[list(heads)] if key == "Q" else value  # per query head, like Q
    return doc


def to_json(result: Result, show, heads) -> str:
    buf = io.StringIO()
    write_json(json_doc(result, show, heads), buf)
    return buf.getvalue()


NEG_INF = float("-inf")


def csv_field(value) -> str:
    """One field as csv.writer writes it inside a row (QUOTE_MINIMAL; "" for an empty one): a field that might need
    quoting (a comma, a quote, a line break) is written by csv.writer itself, so the text is this Python's."""
    text = str(value)
    if not any(c in text for c in ',"\r\n'):
        return text
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerow([text, ""])  # two fields: the field, then ",\n"
    return buf.getvalue()[:-2]


def csv_text(result: Result, show, heads, lead: tuple = ()):
    """The long form as CSV text, one string per matrix row: matrix, head, query, key, query_token, key_token,
    value (key = feature index for Q, K, V); with sinks (gpt-oss), each weights row's sink share as a row of matrix
    "sink" with no key. lead: the first fields of every row (a checkpoint's layer, a batch's sentence). The text is
    csv.writer's, made without it: the labels are quoted once, a row's values turned into Python floats at once
    (the value is repr(float), masked ones "-inf"): under a microsecond a number, against 6 with csv.writer."""
    queries, keys_of = result.labels, result.key_labels  # each a new list: quoted once, and once if they are equal
    labels = [csv_field(s) for s in queries]
    key_labels = labels if keys_of == queries else [csv_field(s) for s in keys_of]
    tau = result.tau
    for name in show:
        key = SHOW_NAMES[name]
        arr = getattr(result, key)
        grid = key in ("scores", "weights", "mask")
        row_names = key_labels if key in ("K", "V") else labels
        if key in ("K", "V") and arr.shape[0] != tau:  # grouped-query: the K/V heads the shown heads read
            blocks = [(g, arr[g]) for g in sorted({kv_head_of(j, tau, arr.shape[0]) for j in heads})]
        else:
            blocks = [(j, arr[j]) for j in heads] if arr.ndim == 3 else [("", arr)]
        for head, matrix in blocks:
            start = ",".join(csv_field(x) for x in (*lead, key, head))
            keys = key_labels if grid else [""] * matrix.shape[1]
            for i in range(matrix.shape[0]):
                values = ["-inf" if v == NEG_INF else repr(v) for v in matrix[i].astype(np.float64).tolist()]
                row = f"{start},{i},"
                yield "".join(
                    [f"{row}{c},{row_names[i]},{k},{v}\n" for c, (k, v) in enumerate(zip(keys, values, strict=True))]
                )
            if key == "weights" and getattr(result, "sinks", None) is not None:  # gpt-oss: the row's sink share
                sink = ",".join(csv_field(x) for x in (*lead, "sink", head))
                yield "".join(f"{sink},{i},,{labels[i]},,{float(result.sinks[head, i])!r}\n"
                              for i in range(matrix.shape[0]))  # fmt: skip


CSV_HEADER = ["matrix", "head", "query", "key", "query_token", "key_token", "value"]


def to_csv(result: Result, show, heads) -> str:
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerow(CSV_HEADER)
    buf.writelines(csv_text(result, show, heads))
    return buf.getvalue()
