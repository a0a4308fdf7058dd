"""`qkv view`: one self-contained HTML page of a run: head view, model view, matrix view, per-head summary.

The page is qkv_cli/views/page/view.html with its CSS and JavaScript inlined and the run's data (html_data) as one
JSON script element: no network access of any kind (a Content-Security-Policy forbids it), so it opens from
file:// anywhere. The data is escaped for a script element (no '<', '>' or '&' survives), and every label is set
in the page as text, never as markup. Each kind's part of the data is built here (views.kinds picks which);
`render_doc` makes the page, `contents` says what it holds (the Python API's qkv.page returns both; qkv view writes
that), `write_page` refuses a page above its limit (--max-page-size) and writes it atomically, and `written` is the
line qkv view prints: the page's size and what it holds.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
import re

from qkv_cli.core.result import Result
from qkv_cli.views.page import data as html_data

SUFFIXES = (".html", ".htm")
SCRIPTS = ("data.js", "draw.js", "headview.js", "matrix.js", "modelview.js", "ui.js")
_MARK = re.compile(r"\{\{(CSP|TITLE|CSS|DATA|JS)\}\}")


def check_page_path(path) -> None:
    """Before any work: the page can be written there."""
    from qkv_cli.views.export.writing import check_output_path

    check_output_path(path, SUFFIXES)


def asset(name: str) -> str:
    from importlib.resources import files

    return files("qkv_cli.views.page").joinpath(name).read_text(encoding="utf-8")


def code() -> tuple[str, str]:
    """The page's CSS and JavaScript, as inlined."""
    return asset("view.css"), "\n".join(asset(name) for name in SCRIPTS)


def _one_layer_meta(r: Result, layer_name: str) -> dict:
    from qkv_cli.core.gqa import kv_heads_of
    from qkv_cli.views.console.describe import settings_line

    return {"run": settings_line(r), "L": 1, "tau": r.tau, "G": r.G, "kv": kv_heads_of(r.tau, r.G).tolist(),
            "layerNames": [layer_name], "detail": [0], "cross": r.is_cross}  # fmt: skip


def dense_page(r: Result) -> dict:
    name = str(r.model.layer) if r.model is not None else ""
    title = f"{r.model.name}: layer {r.model.layer}" if r.model is not None else "qkv: attention weights"
    return {"title": title, **_one_layer_meta(r, name), "sentences": [html_data.dense_sentence(r)]}


def model_page(run: Result) -> dict:
    from qkv_cli.core.gqa import kv_heads_of

    if run.encdec is not None:  # an encoder-decoder: its three attentions, with a switch
        from qkv_cli.views.page.encdec import encdec_page

        return encdec_page(run)

    first, info = run.first_layer(), run.model
    L, tau = run.attentions.shape[:2]
    types = [t.replace("_attention", "") for t in run.layer_types] or [""] * L
    mask = "causal" if info.causal else "bidirectional"
    line = (f"{info.name} ({info.family}) L={L} tau={tau}" + (f" G={first.G}" if first.G != tau else "")
            + f" d={first.d} d_k={first.d_k} m={len(run.labels)} {mask} kernel={run.kernel} {first.dtype}")  # fmt: skip
    return {"title": f"{info.name}: attention", "run": line, "L": L, "tau": tau, "G": first.G,
            "kv": kv_heads_of(tau, first.G).tolist(), "layerNames": [f"{l}" + (f" ({t})" if t else "")
                                                                     for l, t in enumerate(types)],
            "detail": sorted(run.layers), "cross": False, "sentences": [html_data.model_sentence(run)]}  # fmt: skip


def band_page(r: Result) -> dict:
    meta = _one_layer_meta(r, "")
    meta.update(
        detail=[],
        band=int(r.band.shape[-1]),
        notes=[
            f"A long document under a window: only the band was computed; slot t of query i is key i - n_c + 1 + t, "
            f"n_c = {int(r.band.shape[-1])}. Keys outside the window have weight 0 (their mask entry is -inf)."
        ],
    )
    return {"title": "qkv: attention in a sliding window", **meta, "sentences": [html_data.band_sentence(r)]}


def batch_page(batch: Result) -> dict:
    first = batch.items[0]
    meta = _one_layer_meta(first, "")
    L = max(batch.lengths)
    meta["run"] = meta["run"].split(" ", 1)[1] + f" batch of {len(batch.items)} sentences padded to {L} tokens"
    sentences = [html_data.dense_sentence(r, f"{b}: {' '.join(r.labels)} (m={m}, +{L - m} pads)")
                 for b, (r, m) in enumerate(zip(batch.items, batch.lengths, strict=True))]  # fmt: skip
    meta["notes"] = [
        f"A padded batch: every sentence was padded to {L} tokens and its pad keys masked; each is shown "
        "without its pads, so its weights equal a run of that sentence alone."
    ]
    return {"title": "qkv: attention in a padded batch", **meta, "sentences": sentences}


def generation_page(gen: Result, kv_heads: int | None = None, layer: int | None = None) -> dict:
    """Queries: the written tokens (one per step); keys: every token; every layer and head; no scores (the cache
    keeps none). kv_heads: the model's G (the Result does not record it); layer: the one shown first (default last)."""
    from qkv_cli.core.budget import human
    from qkv_cli.core.gqa import kv_heads_of

    steps, L, tau, n = gen.step_attentions.shape
    info, P, G = gen.model, gen.prompt_len, kv_heads or tau
    if gen.context is not None:  # an encoder-decoder: each written token's cross-attention over the source
        from qkv_cli.views.page.encdec import generation_page as encdec_page

        return encdec_page(gen, layer)
    line = (f"{info.name} ({info.family}) L={L} tau={tau}" + (f" G={G}" if G != tau else "")
            + f" wrote {steps} tokens after a prompt of {P}, kernel={gen.kernel}, KV cache "
            + human(gen.cache_bytes))  # fmt: skip
    notes = [
        f"A generation: row t is the token written at step t (position {P} + t); its weights are those of the query "
        f"that wrote it (position {P} + t - 1) on every token before. Keys it had not read yet are masked.",
        html_data.label("Written: " + gen.text[:300]),
    ]
    return {"title": f"{info.name}: what each written token read", "run": line, "L": L, "tau": tau, "G": G,
            "kv": kv_heads_of(tau, G).tolist(), "layerNames": [str(l) for l in range(L)], "detail": [],
            "start": L - 1 if layer is None else layer % L, "cross": False, "notes": notes, "queryOffset": P,
            "titles": ["written tokens (queries)", "keys (every token before)"],
            "noScores": "score: not kept (a generation keeps the weights of each step only)",
            "sentences": [html_data.generation_sentence(gen)]}  # fmt: skip


def attribution_page(r: Result) -> dict:
    """The attributed layer's raw weights (and scores), and the attribution as one more, labelled, "head"."""
    from qkv_cli.views.console.describe import attributed_layer as layer_of
    from qkv_cli.views.console.describe import attribution_formula as describe

    name = str(r.model.layer) if r.model is not None else ""
    meta = _one_layer_meta(r, name)
    meta["attribution"] = {"method": r.method, "layer": layer_of(r), "headFusion": r.head_fusion or None,
                           "label": r.method + (f" ({r.head_fusion})" if r.head_fusion else "")}  # fmt: skip
    meta["notes"] = [
        describe(r) + ".",
        f"The {r.method} attribution is the last head button: not a head, the whole layer's attribution, drawn "
        "in the text colour with each row as a share of its total (as qkv heatmap --method draws it); the tooltip "
        "gives the value itself. Ctrl- or Shift-click it to see it beside the heads' raw weights.",
    ]
    who = f"{r.model.name}: " if r.model is not None else "qkv: "
    return {"title": f"{who}{r.method}, layer {layer_of(r)}", **meta, "sentences": [html_data.attribution_sentence(r)]}


def page_doc(result: Result, own: dict) -> dict:
    """The page's data: what every page holds, around its kind's own part (views.kinds builds it by the kind)."""
    from qkv_cli.views.page.stats import role_short

    doc = {"version": 1, "kind": result.kind.value, "band": 0, "notes": [], "roleShort": role_short(), **own}
    doc["title"], doc["run"] = html_data.label(doc["title"]), html_data.label(doc["run"])
    return doc


def script_json(doc: dict) -> str:
    """JSON that cannot end its script element or open a comment: '<', '>' and '&' as \\u escapes."""
    text = json.dumps(doc, ensure_ascii=True, allow_nan=False, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _sha256(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode("ascii") + "'"


MAX_PAGE = 100_000_000  # bytes: qkv view refuses a larger page unless --max-page-size raises the limit


def render_doc(doc: dict) -> str:
    """The whole page of page_data's doc as one string."""
    css, js = code()
    # nothing may be fetched: no default source; only this page's own script and style (by their hashes) run
    csp = f"default-src 'none'; script-src {_sha256(js)}; style-src {_sha256(css)}; base-uri 'none'; form-action 'none'"
    values = {"CSP": csp, "TITLE": html.escape(doc["title"]), "CSS": css, "DATA": script_json(doc), "JS": js}
    return _MARK.sub(lambda m: values[m.group(1)], asset("view.html"))  # one pass: inserted text is never rescanned


def contents(doc: dict) -> str:
    """What the page holds, for the line qkv view prints: "30 layers x 9 heads x 551 x 551, 8-bit weights"."""
    s = doc["sentences"][0]
    cols = doc["band"] or len(s["keys"])
    shape = f"{doc['L']} layer{'s' if doc['L'] != 1 else ''} x {doc['tau']} heads x {len(s['tokens'])} x {cols}"
    if doc.get("switchLabel"):  # an encoder-decoder: each attention has its own layers, heads and tokens
        shape = ", ".join(f"{t['name'].split(' ')[0]} {t['meta']['L']} x {t['meta']['tau']} x {len(t['tokens'])} x "
                          f"{len(t['keys'])}" for t in doc["sentences"])  # fmt: skip
    entries = [e for t in doc["sentences"] for e in t["layers"]]
    kinds = [name for key, name in (("q8", "8-bit weights"), ("w", "12-bit weights"), ("s", "float16 scores"))
             if any(key in e for e in entries)]  # fmt: skip
    what = "attentions" if doc.get("switchLabel") else "sentences"  # an encoder-decoder: its three attentions
    batch = f"{len(doc['sentences'])} {what}, " if len(doc["sentences"]) > 1 else ""
    return batch + shape + (", " + " and ".join(kinds) if kinds else "")


def write_page(
    page: str,
    holds: str,
    path,
    max_bytes: int = MAX_PAGE,
    option: str = "--max-page-size",
    what: str = "page",
    hints: str = "a shorter text",
) -> str:
    """Write a rendered page atomically, unless it exceeds max_bytes: refused in the one shape of every output
    above its limit (core.output_size.too_large; holds: what it holds; option: the limit's flag or keyword; what:
    the page's name and hints: how to make it smaller, in the refusal). Returns the line saying what was written."""
    from qkv_cli.core.budget import human
    from qkv_cli.core.output_size import too_large
    from qkv_cli.views.export.writing import atomic_write

    data = page.encode("utf-8")
    if len(data) > max_bytes:
        raise too_large(what, len(data), holds, max_bytes, option, hints)
    with atomic_write(path) as handle:
        handle.write(data)
    return f"wrote {path} ({human(len(data))}: {holds}; open it in a browser)"
