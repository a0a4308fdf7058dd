// Matrix view: one head's weights as a heatmap on a canvas (queries down, keys across; a band: the window's slots),
// a tooltip per cell (query, key, weight, score, mask entry); the arrow keys move the query and the key.

let matrixGeom = null;
let heatCache = { key: "", canvas: null };

function matrixHeat() {
  const S = current(), key = [state.sentence, state.layer, state.head, state.scale, dark()].join("|");
  if (heatCache.key !== key) heatCache = { key, canvas: heatCanvas(S, state.layer, state.head, state.scale === "row", cssColour("--masked")) };
  return heatCache.canvas;
}

function drawMatrix() {
  const S = current(), canvas = $("mx"), wrap = $("mx-wrap"), m = S.m, c = S.cols;
  const room = Math.max(200, (wrap.clientWidth || 800) - 12);
  const probe = canvas.getContext("2d");
  probe.font = "12px system-ui, sans-serif";
  let cw = Math.max(2, Math.min(28, Math.floor((room - 100) / c)));
  const tall = 30000 / (window.devicePixelRatio || 1);  // a canvas taller than ~32k pixels is not drawn at all
  const labels = cw >= 10 && m * cw <= tall;
  const colLabels = S.nc ? range(0, c).map((t) => (t === c - 1 ? "i" : `i\u2212${c - 1 - t}`)) : S.keyTokens;
  const width = (list) => Math.min(120, Math.max(10, ...list.slice(0, 2000).map((s) => probe.measureText(short(s, 16)).width)) + 8);
  const LW = labels ? width(S.tokens) : 4, LH = labels ? width(colLabels) : 4;
  if (labels) cw = Math.max(2, Math.min(28, Math.floor((room - LW) / c)));
  const ch = Math.min(cw, (tall - LH - 2) / m);  // rows: as wide as the columns, or thinner for a long document
  const ctx = fitCanvas(canvas, LW + c * cw + 2, LH + m * ch + 2);
  matrixGeom = { LW, LH, cw, ch };
  ctx.imageSmoothingEnabled = false;
  ctx.drawImage(matrixHeat(), LW, LH, c * cw, m * ch);
  const fg = getComputedStyle(document.body).color;
  if (labels) {
    ctx.fillStyle = fg;
    ctx.font = "12px system-ui, sans-serif";
    ctx.textBaseline = "middle";
    ctx.textAlign = "right";
    S.tokens.forEach((s, i) => ctx.fillText(short(s, 16), LW - 4, LH + i * ch + ch / 2));
    ctx.save();
    ctx.rotate(-Math.PI / 2);
    ctx.textAlign = "left";
    colLabels.forEach((s, t) => ctx.fillText(short(s, 16), -(LH - 4), LW + t * cw + cw / 2));
    ctx.restore();
  }
  const { i, t } = state.cell;
  ctx.strokeStyle = fg;
  ctx.globalAlpha = 0.5;
  ctx.lineWidth = 1;
  ctx.strokeRect(LW + 0.5, LH + i * ch + 0.5, c * cw - 1, Math.max(1, ch - 1));
  ctx.globalAlpha = 1;
  ctx.strokeStyle = getComputedStyle(document.documentElement).getPropertyValue("--focus").trim() || "#e66100";
  ctx.lineWidth = 2;
  ctx.strokeRect(LW + t * cw + 1, LH + i * ch + 1, Math.max(2, cw - 2), Math.max(2, ch - 2));
  const what = state.head === ATTR ? `${headName(ATTR)} (row shares)` : `head ${state.head}`;
  canvas.setAttribute("aria-label", `Weights of ${layerText()}${what}: ${m} queries by ${c} ${S.nc ? "window slots" : "keys"}. Arrow keys move the query and the key.`);
  const kv = DOC.G !== DOC.tau && state.head !== ATTR ? ` It reads key/value head ${DOC.kv[state.head]}.` : "";
  $("matrix-caption").textContent = `${layerText(true)}${what[0].toUpperCase()}${what.slice(1)}: rows are queries, columns ${S.nc ? "the window's slots (slot t of query i is key i \u2212 n_c + 1 + t)" : "keys"}.${kv} ` +
    "Point at a cell for its numbers; click, or focus the matrix and use the arrow keys (up and down move the query)." +
    (S.sink(state.layer, state.head, 0) !== null ? " This model has attention sinks: each row sums to 1 minus the share its sink took (in the cell's numbers)." : "");
  if (tipShown) showTip();
}

let tipShown = false;

function cellLines() {  // what the tooltip says about the current cell
  const S = current(), l = state.layer, h = state.head, { i, t } = state.cell, j = S.keyOf(i, t);
  const lines = [`query ${i}: ${S.tokens[i]}`].concat(S.queryNotes ? [S.queryNotes[i]] : []);
  if (j < 0) return lines.concat([`slot ${t}: no key (before the text)`]);
  lines.push(`key ${j}: ${S.keyTokens[j]}`);
  if (h === ATTR) return lines.concat(attributionLines(S, l, i, t));
  if (S.coarse(l)) lines.push(`weight \u2248 ${fmt(S.at(l, h, i, t), 4)} (stored to 1/255 of the row's largest; under 1% of it as 0)`);
  else lines.push(`weight ${fmt(S.at(l, h, i, t), 4)}`);
  const sink = S.sink(l, h, i);
  if (sink !== null) lines.push(`sink share of this row ${fmt(sink, 4)} (the row sums to 1 \u2212 that)`);
  const score = S.score(l, h, i, t);
  if (score !== null) lines.push(`score ${fmt(score, S.scoreDecimals(l, h, i, t))}`);
  else if (S.scoreDropped(l, i, t)) lines.push("score: not stored (a large page keeps the scores of unmasked cells)");
  else if (S.nc) lines.push("score: not kept (a band run keeps the weights only)");
  else if (DOC.noScores) lines.push(DOC.noScores);
  else lines.push(`score: not kept for this layer (qkv view --layer ${state.layer} keeps it)`);
  lines.push(`mask ${S.masked(l, i, t) ? "\u2212\u221e (removed)" : "0"}`);
  lines.push(`head ${h}${DOC.G !== DOC.tau ? ` (reads key/value head ${DOC.kv[h]})` : ""}`);
  return lines;
}

function attributionLines(S, l, i, t) {  // the attribution's value, its row share, and the heads' mean raw weight
  let mean = 0;
  for (let h = 0; h < DOC.tau; h++) mean += S.at(l, h, i, t) / DOC.tau;
  return [`${DOC.attribution.label} ${fmt(S.attribution(i, t), 4)}`, `row share ${fmt(S.at(l, ATTR, i, t), 4)}`,
    `weight, mean over heads ${fmt(mean, 4)}`, `mask ${S.masked(l, i, t, ATTR) ? "\u2212\u221e (removed, and 0)" : "0"}`,
    `${headName(ATTR)}: not a head`];
}

function showTip() {
  const tip = $("tip"), g = matrixGeom;
  if (!g) return;
  tip.replaceChildren(...cellLines().map((line) => el("div", null, line)));
  tip.hidden = false;
  tipShown = true;
  const { i, t } = state.cell, wrap = $("mx-wrap");
  let x = g.LW + (t + 1) * g.cw + 8;
  if (x + tip.offsetWidth > wrap.scrollLeft + wrap.clientWidth) x = Math.max(0, g.LW + t * g.cw - tip.offsetWidth - 8);
  tip.style.left = `${x}px`;
  tip.style.top = `${g.LH + i * g.ch}px`;
}

function hideTip() { $("tip").hidden = true; tipShown = false; }

function cellAt(event) {
  const g = matrixGeom, S = current();
  if (!g) return null;
  const rect = $("mx").getBoundingClientRect();
  const t = Math.floor((event.clientX - rect.left - g.LW) / g.cw), i = Math.floor((event.clientY - rect.top - g.LH) / g.ch);
  return i >= 0 && i < S.m && t >= 0 && t < S.cols ? { i, t } : null;
}

function moveCell(i, t) {
  const S = current();
  state.cell = { i: Math.max(0, Math.min(S.m - 1, i)), t: Math.max(0, Math.min(S.cols - 1, t)) };
}

function setupMatrix() {
  const canvas = $("mx");
  canvas.addEventListener("mousemove", (event) => {
    const at = cellAt(event);
    if (!at) { if (document.activeElement !== canvas) hideTip(); return; }
    if (at.i === state.cell.i && at.t === state.cell.t && tipShown) return;
    state.cell = at;
    drawMatrix();
    showTip();
  });
  canvas.addEventListener("mouseleave", () => { if (document.activeElement !== canvas) hideTip(); });
  canvas.addEventListener("click", (event) => {
    const at = cellAt(event);
    if (!at) return;
    state.cell = at;
    state.lock = { side: "q", i: at.i };
    render();
    showTip();
  });
  canvas.addEventListener("focus", () => showTip());
  canvas.addEventListener("blur", () => hideTip());
  canvas.addEventListener("keydown", (event) => {
    const { i, t } = state.cell, S = current(), page = Math.max(1, Math.floor(($("mx-wrap").clientHeight || 400) / matrixGeom.ch));
    const moves = { ArrowUp: [i - 1, t], ArrowDown: [i + 1, t], ArrowLeft: [i, t - 1], ArrowRight: [i, t + 1],
      PageUp: [i - page, t], PageDown: [i + page, t], Home: [i, 0], End: [i, S.cols - 1] };
    if (event.key === "Escape") { state.lock = null; render(); return; }
    if (!(event.key in moves)) return;
    event.preventDefault();
    moveCell(...moves[event.key]);
    state.lock = { side: "q", i: state.cell.i };
    render();
    showTip();
    const g = matrixGeom, wrap = $("mx-wrap"), y = g.LH + state.cell.i * g.ch, x = g.LW + state.cell.t * g.cw;
    if (y < wrap.scrollTop || y + g.ch > wrap.scrollTop + wrap.clientHeight) wrap.scrollTop = y - wrap.clientHeight / 2;
    if (x < wrap.scrollLeft || x + g.cw > wrap.scrollLeft + wrap.clientWidth) wrap.scrollLeft = x - wrap.clientWidth / 2;
    announce(cellLines().join(", "));
  });
}
