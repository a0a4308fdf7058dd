"""The offline page of a scan: one HTML file, nothing fetched (a Content-Security-Policy allows only its own script
and style). The grid of a score's mean per layer and head; clicking a head lists its top texts, and clicking a text
draws that head's attention on it (queries down, keys across)."""

from __future__ import annotations

import html

from qkv_cli.views.page.html import _sha256, script_json

CSS = """body{font:14px/1.4 system-ui,sans-serif;margin:16px;color:#222}h1{font-size:18px;margin:0 0 4px}
table{border-collapse:collapse}#grid td{width:34px;height:22px;text-align:center;font-size:10px;cursor:pointer;
border:1px solid #fff}#grid td.on{outline:2px solid #d33}#grid th{font-weight:normal;font-size:11px;color:#555}
.side{display:flex;gap:24px;align-items:flex-start}#tops li{cursor:pointer;margin:2px 0}#tops li.on{font-weight:bold}
#att td{width:16px;height:16px;border:1px solid #fff}#att th{font-size:10px;font-weight:normal;color:#444}
#att thead th{writing-mode:vertical-rl;transform:rotate(180deg);height:60px}.dim{color:#666;font-size:12px}"""

JS = r"""(function(){
const D = JSON.parse(document.getElementById("qkv-scan").textContent);
const grid = D.grid, L = grid.length, tau = grid[0].length;
let lo = Infinity, hi = -Infinity;
grid.forEach(r => r.forEach(v => { lo = Math.min(lo, v); hi = Math.max(hi, v); }));
function colour(v, a, b) { const x = b > a ? (v - a) / (b - a) : 0.5;
  return "hsl(" + (260 - 200 * x) + ",70%," + (22 + 50 * x) + "%)"; }
function el(tag, text) {
  const e = document.createElement(tag); if (text !== undefined) e.textContent = text; return e; }
const table = document.getElementById("grid"), head = el("tr");
head.appendChild(el("th", "layer \\ head"));
for (let j = 0; j < tau; j++) head.appendChild(el("th", String(j)));
table.appendChild(head);
for (let l = 0; l < L; l++) {
  const tr = el("tr"); tr.appendChild(el("th", String(l)));
  for (let j = 0; j < tau; j++) {
    const td = el("td", grid[l][j].toFixed(2));
    td.style.background = colour(grid[l][j], lo, hi);
    td.style.color = (grid[l][j] - lo) > (hi - lo) / 2 ? "#000" : "#fff";
    td.title = "layer " + l + ", head " + j + ": mean " + grid[l][j];
    td.addEventListener("click", () => pick(l, j, td));
    tr.appendChild(td);
  }
  table.appendChild(tr);
}
function pick(l, j, td) {
  document.querySelectorAll("#grid td.on").forEach(e => e.classList.remove("on")); td.classList.add("on");
  const list = document.getElementById("tops"); list.textContent = "";
  document.getElementById("which").textContent = "layer " + l + ", head " + j + ": top texts by " + D.score;
  (D.heads[l + "," + j] || []).forEach((t, k) => {
    const li = el("li", D.score + " " + t[1].toFixed(3) + "  (text " + t[0] + "): " + D.texts[t[0]].join(" "));
    li.addEventListener("click", () => draw(t, li)); list.appendChild(li); if (k === 0) draw(t, li);
  });
}
function draw(t, li) {
  document.querySelectorAll("#tops li.on").forEach(e => e.classList.remove("on")); li.classList.add("on");
  const labels = D.texts[t[0]], w = t[2], att = document.getElementById("att"); att.textContent = "";
  const thead = el("thead"), tr = el("tr"); tr.appendChild(el("th", ""));
  labels.forEach(s => tr.appendChild(el("th", s))); thead.appendChild(tr); att.appendChild(thead);
  w.forEach((row, i) => { const r = el("tr"); r.appendChild(el("th", labels[i]));
    row.forEach((v, k) => { const c = el("td"); c.style.background = colour(v, 0, 1);
      c.title = labels[i] + " -> " + labels[k] + ": " + v; r.appendChild(c); }); att.appendChild(r); });
}
})();"""


def render(doc: dict) -> str:
    """The whole page as one string (doc: pipeline.scan.page.page_data's)."""
    from qkv_cli.views.console import clean

    csp = f"default-src 'none'; script-src {_sha256(JS)}; style-src {_sha256(CSS)}; base-uri 'none'; form-action 'none'"
    title = html.escape(clean(f"qkv scan: {doc['score']} of {doc['model']}"))
    about = f"mean {doc['score']} per layer and head over {doc['texts_scanned']:,} texts of {doc['corpus']}"
    about = html.escape(clean(about + "; click a head for its top texts, a text for that head's attention"))
    return (f'<!DOCTYPE html><html><head><meta charset="utf-8"><meta http-equiv="Content-Security-Policy" '
            f'content="{csp}"><title>{title}</title><style>{CSS}</style></head><body><h1>{title}</h1>'
            f'<p class="dim">{about}</p><div class="side"><table id="grid"></table><div><p id="which" class="dim">'
            f'</p><ol id="tops"></ol><table id="att"></table></div></div>'
            f'<script type="application/json" id="qkv-scan">{script_json(doc)}</script><script>{JS}</script>'
            "</body></html>")  # fmt: skip
