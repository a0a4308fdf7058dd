"""The page of a comparison (`qkv compare --page`): one offline HTML file with what A and B are and how they were
aligned, the figure of A, B and B - A, the heads that moved most, and A's and B's own interactive pages side by
side (each in an iframe whose srcdoc holds it, so their scripts and styles stay apart). Nothing is fetched."""

from __future__ import annotations

import html

from qkv_cli.pipeline.compare import Comparison
from qkv_cli.views.page.html import MAX_PAGE

STYLE = """body{font:14px/1.4 system-ui,sans-serif;margin:16px;color:#222}h1{font-size:18px;margin:0 0 8px}
pre{background:#f6f6f6;padding:8px;white-space:pre-wrap}table{border-collapse:collapse;margin:8px 0}
td,th{border:1px solid #ccc;padding:2px 8px;text-align:right}th{background:#eee}
.pair{display:flex;gap:12px}.pair>div{flex:1;min-width:0}iframe{width:100%;height:900px;border:1px solid #ccc}
img{max-width:100%}"""


def render(cmp: Comparison, head: int | None = None, top: int = 10) -> str:
    """The whole page as one string: header, figure (PNG, inline), the moved heads, both runs' pages."""
    from qkv_cli.views.console.compare import header
    from qkv_cli.views.kinds import render as page_of

    esc = html.escape
    rows = "".join(
        f"<tr><td>{r['layer']}</td><td>{r['head']}</td><td>{r['tv']:.3f}</td><td>{r['max_change']:+.3f}</td>"
        f"<td>{r['query_a']}</td><td>{r['key_a']}</td></tr>"
        for r in cmp.moved(top)
    )
    sides = "".join(
        f'<div><h2>{name}</h2><iframe title="{name}" sandbox="allow-scripts" '
        f'srcdoc="{esc(page_of(run), quote=True)}"></iframe></div>'
        for name, run in (("A", cmp.a), ("B", cmp.b))
    )
    return (
        '<!DOCTYPE html><html><head><meta charset="utf-8"><title>qkv compare</title>'
        f"<style>{STYLE}</style></head><body><h1>qkv compare: A, B and B - A</h1>"
        f"<pre>{esc(chr(10).join(header(cmp)))}</pre>"
        f'<img alt="A, B and B - A of the layer and head compared" src="data:image/png;base64,{_figure(cmp, head)}">'
        f"<h2>Heads that moved most (total-variation distance over the aligned queries)</h2><table><tr>"
        f"<th>layer</th><th>head</th><th>TV</th><th>largest change</th><th>query (A)</th><th>key (A)</th></tr>"
        f'{rows}</table><div class="pair">{sides}</div></body></html>'
    )


def _figure(cmp: Comparison, head: int | None) -> str:  # -> the figure of views.figures.compare as base64 PNG
    import base64
    import io

    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from qkv_cli.views.figures.compare import draw

    fig = draw(cmp, head)
    FigureCanvasAgg(fig)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=fig.dpi)
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def save(cmp: Comparison, path, head: int | None = None, top: int = 10, max_bytes: int = MAX_PAGE) -> str:
    """Write the page atomically, unless it would exceed max_bytes; returns the line the CLI prints."""
    from qkv_cli.views.page.html import write_page

    holds = "A and B side by side, B - A"
    return write_page(render(cmp, head, top), holds, path, max_bytes, what="comparison's page", hints="shorter texts")
