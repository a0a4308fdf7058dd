// qkv patch --page: the recovery grids; clicking a cell shows both runs' attention at that layer (the cell's head,
// or the mean over heads for a position), clean beside corrupted. Data: the JSON in #qkv-data.
"use strict";
const D = JSON.parse(document.getElementById("qkv-data").textContent);

function colour(v, size) {  // diverging: blue below 0, white at 0, red towards 1 and beyond
  const t = Math.max(-1, Math.min(1, v / size));
  const c = Math.round(255 * (1 - Math.abs(t)));
  return t >= 0 ? `rgb(255,${c},${c})` : `rgb(${c},${c},255)`;
}

function weightColour(w) {
  const c = Math.round(255 * (1 - w));
  return `rgb(${c},${c},255)`;
}

function cell(tag, text, style) {
  const el = document.createElement(tag);
  el.textContent = text;
  if (style) el.style.background = style;
  return el;
}

function grid(what) {
  const rec = D.recovery[what], labels = D.labels[what];
  const size = Math.max(1, ...rec.flat().map(Math.abs));
  const table = document.createElement("table");
  const head = document.createElement("tr");
  head.appendChild(cell("th", "layer"));
  labels.forEach((l) => head.appendChild(cell("th", l)));
  table.appendChild(head);
  rec.forEach((row, layer) => {
    const tr = document.createElement("tr");
    tr.appendChild(cell("th", String(layer)));
    row.forEach((v, i) => {
      const td = cell("td", v.toFixed(2), colour(v, size));
      td.tabIndex = 0;
      td.title = `${what}, layer ${layer}, ${labels[i]}: recovery ${v.toFixed(4)}`;
      const show = () => attention(what, layer, i);
      td.addEventListener("click", show);
      td.addEventListener("keydown", (e) => { if (e.key === "Enter" || e.key === " ") show(); });
      tr.appendChild(td);
    });
    table.appendChild(tr);
  });
  return table;
}

function matrix(title, w, labels, keys) {  // rows: the queries' labels; columns: the keys' (cross: the source's)
  const box = document.createElement("div");
  box.appendChild(cell("h3", title));
  const table = document.createElement("table");
  const head = document.createElement("tr");
  head.appendChild(cell("th", ""));
  keys.forEach((l) => head.appendChild(cell("th", l)));
  table.appendChild(head);
  w.forEach((row, q) => {
    const tr = document.createElement("tr");
    tr.appendChild(cell("th", labels[q]));
    row.forEach((v, k) => tr.appendChild(cell("td", k <= q || v > 0 ? v.toFixed(2) : "", weightColour(v))));
    table.appendChild(tr);
  });
  box.appendChild(table);
  return box;
}

function attention(what, layer, i) {
  const byHead = !["resid", "attn", "mlp"].includes(what);
  const heads = what === "k" || what === "v" ? D.groups[i] : (byHead ? [i] : null);
  const pick = (run) => {
    const L = run[layer];
    const chosen = heads === null ? L : heads.map((j) => L[j]);
    return chosen[0].map((row, q) => row.map((_, k) => chosen.reduce((s, h) => s + h[q][k], 0) / chosen.length));
  };
  const out = document.getElementById("attention");
  out.replaceChildren();
  const which = heads === null ? "mean over heads" : (heads.length > 1 ? `mean of heads ${heads.join(", ")}` : `head ${heads[0]}`);
  out.appendChild(cell("p", `layer ${layer}, ${which}`));
  const pair = document.createElement("div");
  pair.className = "pair";
  pair.appendChild(matrix("clean", pick(D.attention_clean), D.tokens_clean, D.keys_clean));
  pair.appendChild(matrix("corrupted", pick(D.attention_corrupted), D.tokens_corrupted, D.keys_corrupted));
  out.appendChild(pair);
}

const root = document.getElementById("grids");
D.what.forEach((what) => {
  root.appendChild(cell("h2", `${what}: ${D.says[what]}`));
  root.appendChild(grid(what));
});
