"""The page of `qkv patch --page`: every --what's recovery grid; clicking a cell shows both runs' attention at that
layer (the cell's head, a key/value head's query heads, or the mean over heads for a position). One offline file:
its data, script (views/page/patch.js) and style inline, nothing fetched (a content security policy says so)."""

from __future__ import annotations

import html

import numpy as np

from qkv_cli.errors import QkvError
from qkv_cli.pipeline.patch.result import Patching
from qkv_cli.views.console import clean
from qkv_cli.views.console.patch import WHAT_SAYS, header
from qkv_cli.views.page.html import MAX_PAGE, _sha256, asset, script_json

HOLDS = "the recovery grids and both runs' attention"  # what the page holds, in words
CSS = ("body{font-family:system-ui,sans-serif;margin:16px;color:#222}table{border-collapse:collapse;margin:6px 0}"
       "td,th{border:1px solid #ddd;padding:2px 5px;font-size:12px;text-align:right}td[tabindex]{cursor:pointer}"
       ".pair{display:flex;gap:24px;flex-wrap:wrap}pre{white-space:pre-wrap}")  # fmt: skip


def doc(p: Patching) -> dict:
    if p.attention is None:
        raise QkvError("the page shows both runs' attention: run the patching with attention=True (qkv patch --page)")
    r = p.tau // p.G
    keys = p.sources if p.side == "cross" else (p.labels_clean, p.labels_corrupted)  # cross: the source's keys
    return {
        "what": list(p.what), "says": {w: WHAT_SAYS[w] for w in p.what},
        "recovery": {w: np.round(p.recovery[w], 6).tolist() for w in p.what},
        "labels": {w: [clean(s) for s in p.column_labels(w)] for w in p.what},
        "groups": [list(range(g * r, (g + 1) * r)) for g in range(p.G)],
        "tokens_clean": [clean(s) for s in p.labels_clean], "tokens_corrupted": [clean(s) for s in p.labels_corrupted],
        "keys_clean": [clean(s) for s in keys[0]], "keys_corrupted": [clean(s) for s in keys[1]],
        "attention_clean": np.round(p.attention[0].astype(np.float64), 4).tolist(),
        "attention_corrupted": np.round(p.attention[1].astype(np.float64), 4).tolist(),
    }  # fmt: skip


def render(p: Patching) -> str:
    js = asset("patch.js")
    csp = f"default-src 'none'; script-src {_sha256(js)}; style-src {_sha256(CSS)}; base-uri 'none'; form-action 'none'"
    lines = "\n".join(html.escape(line) for line in header(p))
    return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><meta http-equiv="Content-Security-Policy" '
            f'content="{csp}"><title>qkv patch: {html.escape(clean(p.model))}</title><style>{CSS}</style></head>'
            f"<body><h1>Activation patching</h1><pre>{lines}</pre><div id=\"attention\"><p>Click a cell to see both "
            f'runs\' attention at its layer.</p></div><div id="grids"></div>'
            f'<script type="application/json" id="qkv-data">{script_json(doc(p))}</script>'
            f"<script>{js}</script></body></html>")  # fmt: skip


def save(p: Patching, path, max_bytes: int = MAX_PAGE, option: str = "--max-page-size") -> str:
    """Write the page atomically, unless it would exceed max_bytes (refused as every page is: views.page.html's
    write_page); returns the line the CLI prints."""
    from qkv_cli.views.page.html import write_page

    hints = "shorter prompts or fewer --what"
    return write_page(render(p), HOLDS, path, max_bytes, option, what="patching page", hints=hints)
