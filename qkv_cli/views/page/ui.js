// The controls (sentence, layer, heads, views, settings), the per-head summary, the legend, the keyboard, and
// window.qkvView: {tokens, keyTokens, shape: [L, tau, m, n], weight(l, h, i, j), select({layer, head, query})}
// (an attribution page adds attribution(i, j), and "attribution" as a head for select).

const state = {
  sentence: DOC.startSentence || 0,
  layer: DOC.start !== undefined ? DOC.start : DOC.detail.length ? DOC.detail[0] : 0,
  heads: range(0, DOC.tau),
  head: 0,
  view: "head",
  hover: null,  // {side: "q" | "k", i}: the token pointed at or focused
  lock: null,  // the token clicked
  cell: { i: 0, t: 0 },  // the matrix view's cell: query i, stored cell t (a key; a band: a window slot)
  threshold: 0.01,
  scale: "abs",
};

function current() { return SENTENCES[state.sentence]; }

function layerText(capital) {  // "layer 3, " where there is more than one layer (or a checkpoint's one)
  const name = DOC.layerNames[state.layer];
  return DOC.L > 1 || name ? `${capital ? "L" : "l"}ayer ${name}, ` : "";
}

function announce(text) { $("live").textContent = text; }

function buildControls() {
  $("title").textContent = DOC.title;
  buildLayersAndHeads();
  const layer = $("layer");
  layer.addEventListener("change", () => { state.layer = Number(layer.value); render(); });
  if (SENTENCES.length > 1) {
    const pick = $("sentence");
    SENTENCES.forEach((S, b) => pick.appendChild(el("option", { value: String(b) }, short(S.name, 80))));
    $("sentence-box").hidden = false;
    if (DOC.switchLabel) $("sentence-label").textContent = DOC.switchLabel;
    pick.value = String(state.sentence);
    pick.addEventListener("change", () => setSentence(Number(pick.value)));
  }
  $("heads").addEventListener("click", (event) => {
    const node = event.target.closest(".hbtn");
    if (node) clickHead(Number(node.dataset.h), event.shiftKey || event.ctrlKey || event.metaKey);
  });
  $("all-heads").addEventListener("click", () => { state.heads = range(0, DOC.tau); render(); });
  for (const tab of document.querySelectorAll("[role=tab]")) {
    tab.addEventListener("click", () => setView(tab.dataset.view));
    tab.addEventListener("keydown", (event) => {
      const tabs = [...document.querySelectorAll("[role=tab]")], k = tabs.indexOf(tab);
      const next = { ArrowRight: k + 1, ArrowLeft: k - 1, Home: 0, End: tabs.length - 1 }[event.key];
      if (next === undefined) return;
      event.preventDefault();
      const target = tabs[(next + tabs.length) % tabs.length];
      setView(target.dataset.view);
      target.focus();
    });
  }
  const threshold = $("threshold");
  threshold.addEventListener("input", () => {
    state.threshold = Number(threshold.value);
    $("threshold-value").textContent = threshold.value;
    render();
  });
  $("scale").addEventListener("change", () => { state.scale = $("scale").value; render(); });
}

function applyMeta(S) {  // an encoder-decoder's attention: its own layers, heads and token titles
  if (!S.meta) return;
  Object.assign(DOC, S.meta);
  HEADS = DOC.tau + (DOC.attribution ? 1 : 0);
  state.layer = Math.min(state.layer, DOC.L - 1);
  state.heads = range(0, DOC.tau);
  state.head = 0;
}

function buildLayersAndHeads() {  // the controls that depend on the layers and heads shown
  $("run").textContent = DOC.run;
  $("run-settings").textContent = `Run: ${DOC.run}`;
  const titles = DOC.titles || (DOC.cross ? ["queries (the text)", "keys (the context)"] : ["queries", "keys"]);
  $("hv-qtitle").textContent = titles[0];
  $("hv-ktitle").textContent = titles[1];
  $("layer").replaceChildren(...DOC.layerNames.map((name, l) => el("option", { value: String(l) },
    name + (DOC.detail.includes(l) ? " \u00b7 scores" : ""))));
  $("layer-box").hidden = DOC.L < 2;
  const heads = $("heads");
  heads.replaceChildren();
  for (let h = 0; h < HEADS; h++) {
    const rgb = headRGB(h), kv = DOC.G !== DOC.tau && h !== ATTR ? ` reads key/value head ${DOC.kv[h]}` : "";
    const text = h === ATTR ? DOC.attribution.label : DOC.G !== DOC.tau ? `${h}\u2192${DOC.kv[h]}` : String(h);
    const what = h === ATTR ? `${headName(h)} of the layer (not a head; rows as shares)` : `head ${h}${kv}`;
    const button = el("button", { type: "button", class: h === ATTR ? "hbtn attr" : "hbtn", "data-h": String(h),
      "aria-pressed": "false", title: `${what}: click to show it alone, Ctrl- or Shift-click to add it` }, text);
    button.style.setProperty("--c", rgba(rgb, 1));
    heads.appendChild(button);
  }
}

function clickHead(h, add) {
  if (!add) state.heads = [h];
  else if (state.heads.includes(h) && state.heads.length > 1) state.heads = state.heads.filter((x) => x !== h);
  else if (!state.heads.includes(h)) state.heads = [...state.heads, h].sort((a, b) => a - b);
  state.head = state.heads.includes(h) ? h : state.heads[0];
  render();
}

function setSentence(b) {
  state.sentence = b;
  if (current().meta) { applyMeta(current()); buildLayersAndHeads(); }
  state.hover = null;
  state.lock = null;
  state.cell = { i: 0, t: 0 };
  heatCache.key = "";
  gridKey = "";
  $("sentence").value = String(b);
  buildTokens(current());
  render();
}

function setView(view) {
  state.view = view;
  for (const tab of document.querySelectorAll("[role=tab]")) {
    const on = tab.dataset.view === view;
    tab.setAttribute("aria-selected", on ? "true" : "false");
    tab.tabIndex = on ? 0 : -1;
    $(`view-${tab.dataset.view}`).hidden = !on;
  }
  if (view !== "matrix") hideTip();
  render();
}

function summary() {
  const S = current(), stats = S.stats, table = $("summary"), kv = DOC.G !== DOC.tau;
  const l = stats.rows.length > 1 ? state.layer : 0;
  const head = el("tr");
  head.append(el("th", { scope: "col" }, "head"));
  if (kv) head.append(el("th", { scope: "col", title: "the key/value head it reads" }, "kv"));
  for (const [, title] of stats.columns) head.append(el("th", { scope: "col" }, title));
  head.append(el("th", { scope: "col" }, "role"));
  const rows = stats.rows[l].map((values, h) => {
    const tr = el("tr", { class: (state.heads.includes(h) ? "shown" : "") + (h === state.head ? " primary" : "") });
    const button = el("button", { type: "button", title: `show head ${h} alone` }, String(h));
    button.style.setProperty("--c", rgba(headRGB(h), 1));
    button.addEventListener("click", () => clickHead(h, false));
    const cell = el("td");
    cell.appendChild(button);
    tr.append(cell);
    if (kv) tr.append(el("td", null, String(DOC.kv[h])));
    values.forEach((v, k) => tr.append(el("td", null, fmt(v, stats.columns[k][0] === "entropy" || stats.columns[k][0] === "mean_distance" ? 2 : 3))));
    tr.append(el("td", null, stats.roles ? stats.roles[l][h] : "\u2013"));
    return tr;
  });
  table.replaceChildren(el("caption", { class: "sr-only" }, `Per-head summary, ${layerText()}one row per head`),
    el("thead"), el("tbody"));
  table.tHead.appendChild(head);
  table.tBodies[0].append(...rows);
  $("summary-title").textContent = `Per-head summary${DOC.L > 1 ? `, layer ${DOC.layerNames[state.layer]}` : ""}`;
  $("summary-note").textContent = stats.note;
}

function legend() {
  const ramp = $("ramp"), ctx = ramp.getContext("2d"), img = ctx.createImageData(256, 1);
  for (let k = 0; k < 256; k++) { img.data.set([RAMP[3 * k], RAMP[3 * k + 1], RAMP[3 * k + 2], 255], 4 * k); }
  for (let y = 0; y < ramp.height; y++) ctx.putImageData(img, 0, y);
  $("ramp-top").textContent = state.scale === "row" ? "row max" : "1";
  const S = current(), kept = DOC.detail.map((l) => DOC.layerNames[l]).join(", ");
  const items = [
    "Weights \u03b1 = Softmax(Q K\u1d40 / \u221ad_k + Mask): each query's row sums to 1 over the keys it may see.",
    "Head view: line opacity is the weight; one colour per head (the head buttons above).",
    "Model view: one small heatmap per layer and head. Matrix view: rows are queries, columns keys.",
    DOC.noScores ? `No scores: ${DOC.noScores.replace(/^score: /, "")}.` :
    DOC.L > 1 ? `Scores (Q K\u1d40 scaled) are kept for layer ${kept || "none"}; other layers show weights only.` :
      (S.nc ? "A band run keeps the window's weights only (no scores)." : "The tooltip shows each cell's score and mask entry."),
    "Keys: Tab moves between controls; arrows move along tokens, thumbnails and cells; Enter or Space picks; " +
      "Escape releases; [ and ] change the layer, , and . the head, 1 2 3 the view.",
  ];
  if (DOC.G !== DOC.tau) items.push(`Grouped-query attention: ${DOC.tau} query heads share ${DOC.G} key/value heads; head j reads key/value head j \u00f7 ${DOC.tau / DOC.G} (the buttons show j\u2192kv).`);
  items.push(...DOC.notes);
  if (S.raw.some((e) => e.beyond)) items.push("Scores too large for the page (a row max beyond float32's 3.4e38, or a score more than 65504 below it) are not stored: those layers show weights only.");
  if (state.threshold > 0) items.push(`Lines for weights below ${state.threshold} are hidden (Settings).`);
  $("legend").replaceChildren(...items.map((text) => el("li", null, text)));
}

function markControls() {
  $("layer").value = String(state.layer);
  for (const node of document.querySelectorAll(".hbtn")) {
    node.setAttribute("aria-pressed", state.heads.includes(Number(node.dataset.h)) ? "true" : "false");
  }
}

function render() {
  markControls();
  if (state.view === "head") { headCaption(); renderHead(); }
  else if (state.view === "model") buildGrid();
  else drawMatrix();
  summary();
  legend();
}

function onGlobalKey(event) {
  if (event.ctrlKey || event.metaKey || event.altKey || event.target.closest("input, select, textarea")) return;
  const step = { "[": -1, "]": 1 }[event.key], hstep = { ",": -1, ".": 1 }[event.key];
  if (step) { state.layer = (state.layer + step + DOC.L) % DOC.L; render(); }
  else if (hstep) { const h = (state.head + hstep + HEADS) % HEADS; state.heads = [h]; state.head = h; render(); }
  else if (["1", "2", "3"].includes(event.key)) setView(["head", "model", "matrix"][Number(event.key) - 1]);
}

function checkIndex(name, value, count) {
  if (!Number.isInteger(value) || value < 0 || value >= count) throw new RangeError(`${name} ${value} does not exist: 0..${count - 1}`);
  return value;
}

window.qkvView = {
  get tokens() { return current().tokens.slice(); },
  get keyTokens() { return current().keyTokens.slice(); },
  get shape() { const S = current(); return [DOC.L, DOC.tau, S.m, S.n]; },
  get sentences() { return SENTENCES.length; },
  kind: DOC.kind,
  ready: false,
  weight(l, h, i, j) {  // the weight the page shows for query i on key j (0 outside a band's window)
    const S = current();
    checkIndex("layer", l, DOC.L); checkIndex("head", h, DOC.tau); checkIndex("query", i, S.m); checkIndex("key", j, S.n);
    return S.weight(l, h, i, j);
  },
  masked(l, i, j) {  // the page shows the cell as removed (-inf): the mask, a generation's later keys, a band's edge
    const S = current();
    checkIndex("layer", l, DOC.L); checkIndex("query", i, S.m); checkIndex("key", j, S.n);
    const t = S.slot(i, j);
    return t < 0 || S.masked(l, i, t);
  },
  method: DOC.attribution ? DOC.attribution.method : null,
  attribution: DOC.attribution ? (i, j) => {  // the attribution's own value for query i, key j (as its NPZ has it)
    const S = current();
    checkIndex("query", i, S.m); checkIndex("key", j, S.n);
    return S.attribution(i, j);
  } : null,
  score(l, h, i, j) { const S = current(), t = S.slot(i, j); return t < 0 ? null : S.score(l, h, i, t); },
  select(o = {}) {  // what a click does: a sentence, a layer, a head (or several), a query token, a key token, a view
    if (o.sentence !== undefined) setSentence(checkIndex("sentence", o.sentence, SENTENCES.length));
    if (o.layer !== undefined) state.layer = checkIndex("layer", o.layer, DOC.L);
    if (o.head !== undefined) {
      const heads = (Array.isArray(o.head) ? o.head : [o.head]).map((h) => (h === "attribution" && ATTR >= 0 ? ATTR : checkIndex("head", h, DOC.tau)));
      state.heads = [...new Set(heads)].sort((a, b) => a - b);
      state.head = heads[0];
    }
    if (o.query !== undefined) {
      state.lock = o.query === null ? null : { side: "q", i: checkIndex("query", o.query, current().m) };
      if (o.query !== null) state.cell.i = o.query;
    }
    if (o.key !== undefined) state.lock = o.key === null ? null : { side: "k", i: checkIndex("key", o.key, current().n) };
    if (o.view !== undefined) setView(o.view);
    else render();
    return this.state();
  },
  state() {  // the attribution's "head" reads "attribution"
    const name = (h) => (h === ATTR ? "attribution" : h);
    return JSON.parse(JSON.stringify({ sentence: state.sentence, layer: state.layer, heads: state.heads.map(name),
      head: name(state.head), view: state.view, lock: state.lock, cell: state.cell }));
  },
};

function start() {
  applyMeta(current());
  buildControls();
  setupHeadView();
  setupMatrix();
  setupModelView();
  document.addEventListener("keydown", onGlobalKey);
  window.addEventListener("resize", () => { gridKey = ""; render(); });
  if (window.matchMedia) {
    window.matchMedia("(prefers-color-scheme: dark)").addEventListener("change", () => {
      heatCache.key = ""; gridKey = "";
      for (const node of document.querySelectorAll(".hbtn")) node.style.setProperty("--c", rgba(headRGB(Number(node.dataset.h)), 1));
      render();
    });
  }
  buildTokens(current());
  state.started = state.heads = differingHeads(current(), state.layer);  // not all: a tangle of lines
  state.head = state.heads[0];
  setView("head");
  window.qkvView.readyAt = performance.now();  // ms since the navigation started: drawn and listening
  window.qkvView.ready = true;
  document.documentElement.dataset.ready = "true";
}

inflateAll(DOC).then(start);
