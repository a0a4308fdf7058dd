// Head view: queries on the left, keys on the right, one line per weight (opacity = alpha_ij), a colour per head.
// Only the rows in sight are drawn (the canvas follows the scroll), so a long document stays fast.

const ROW = 20;
const BUCKETS = 24;  // line opacities are drawn in 24 steps: one path per step and head
const OFFSET = DOC.queryOffset || 0;  // a generation: query row t is drawn beside key OFFSET + t, its own token
let shaded = [];

// The heads the page starts with: all of them when there are two or fewer, else the two that differ most (the
// head farthest from the layer's mean pattern, then the head farthest from it; distance: the mean over query rows
// of the total variation 1/2 sum_j |alpha_ij - beta_ij|, over at most 256 rows evenly spread).
function differingHeads(S, l) {
  const tau = DOC.tau, c = S.cols, W = S.weights(l);
  if (tau <= 2) return range(0, tau);
  const step = Math.max(1, Math.ceil(S.m / 256)), rows = [];
  for (let i = 0; i < S.m; i += step) rows.push(i);
  const mean = new Float64Array(S.m * c);
  for (let h = 0; h < tau; h++) for (const i of rows) for (let t = 0; t < c; t++) mean[i * c + t] += W[(h * S.m + i) * c + t] / tau;
  const apart = (h, other) => {  // other: a head, or -1 for the mean pattern
    let sum = 0;
    for (const i of rows) for (let t = 0; t < c; t++) {
      const b = other < 0 ? mean[i * c + t] : W[(other * S.m + i) * c + t];
      sum += Math.abs(W[(h * S.m + i) * c + t] - b);
    }
    return sum / 2 / rows.length;
  };
  const farthest = (from, skip) => {
    let best = -1, far = -1;
    for (let h = 0; h < tau; h++) { if (h === skip) continue; const d = apart(h, from); if (d > far) { far = d; best = h; } }
    return best;
  };
  const a = farthest(-1, -1), b = farthest(a, a);
  return [a, b].sort((x, y) => x - y);
}

function buildTokens(S) {
  const q = $("hv-q"), k = $("hv-k");
  q.replaceChildren();
  k.replaceChildren();
  const make = (labels, side, box) => {
    const frag = document.createDocumentFragment();
    labels.forEach((text, i) => {
      const note = side === "q" && S.queryNotes ? ` (${S.queryNotes[i]})` : "";
      frag.appendChild(el("div", { class: "tok", role: "option", dir: "auto", tabIndex: i === 0 ? 0 : -1,
        "data-side": side, "data-i": String(i), title: `${side === "q" ? "query" : "key"} ${i}: ${text}${note}` }, text));
    });
    box.appendChild(frag);
  };
  make(S.tokens, "q", q);
  make(S.keyTokens, "k", k);
  q.style.paddingTop = `${OFFSET * ROW}px`;  // a generation: each written token beside itself among the keys
  $("hv").style.height = `${Math.max(S.m + OFFSET, S.n) * ROW}px`;
  shaded = [];
}

function tokenAt(side, i) { return $(side === "q" ? "hv-q" : "hv-k").children[i]; }

function focusToken() { return state.hover || state.lock; }

function drawHeadView() {
  const S = current(), l = state.layer, scroll = $("hv-scroll"), mid = $("hv-mid"), canvas = $("hv-canvas");
  const top = scroll.scrollTop, height = Math.min(scroll.clientHeight || 600, Math.max(S.m + OFFSET, S.n) * ROW);
  const width = mid.clientWidth;
  canvas.style.left = `${mid.offsetLeft}px`;
  canvas.style.top = `${top}px`;
  const ctx = fitCanvas(canvas, width, height);
  ctx.translate(0, -top);
  const focus = focusToken(), x0 = 2, x1 = width - 2;
  const lo = Math.floor(top / ROW), hi = Math.ceil((top + height) / ROW);
  let rows;
  if (focus && focus.side === "q") rows = [focus.i];
  else if (S.nc) rows = range(Math.max(0, lo - S.nc), Math.min(S.m, hi + S.nc));
  else rows = range(0, S.m);
  const keyOnly = focus && focus.side === "k" ? focus.i : -1;
  ctx.lineWidth = focus ? 2.5 : 1.5;
  for (const h of state.heads) {
    const paths = Array.from({ length: BUCKETS + 1 }, () => new Path2D());
    const W = S.weights(l), c = S.cols, tops = state.scale === "row" ? S.rowMax(l) : null;
    for (const i of rows) {
      const base = (h * S.m + i) * c, r = tops ? tops[h * S.m + i] || 1 : 1, yq = (i + OFFSET) * ROW + ROW / 2;
      const t0 = keyOnly >= 0 ? S.slot(i, keyOnly) : 0, t1 = keyOnly >= 0 ? t0 + 1 : c;
      if (t0 < 0) continue;
      for (let t = t0; t < t1; t++) {
        const w = W[base + t];
        if (w < state.threshold || w === 0) continue;
        const j = S.keyOf(i, t), yk = j * ROW + ROW / 2;
        if (j < 0 || Math.max(yq, yk) < top - ROW || Math.min(yq, yk) > top + height + ROW) continue;
        const k = Math.max(1, Math.round(Math.min(1, w / r) * BUCKETS));
        paths[k].moveTo(x0, yq);
        paths[k].lineTo(x1, yk);
      }
    }
    ctx.strokeStyle = rgba(headRGB(h), 1);
    for (let k = 1; k <= BUCKETS; k++) {
      ctx.globalAlpha = k / BUCKETS;
      ctx.stroke(paths[k]);
    }
  }
  ctx.globalAlpha = 1;
}

function range(a, b) { const out = []; for (let k = a; k < b; k++) out.push(k); return out; }

function shadeTokens() {  // with a token in focus: the other column tinted by its weight (the primary head)
  for (const node of shaded) { node.style.backgroundColor = ""; node.classList.remove("focus", "locked"); }
  shaded = [];
  const S = current(), focus = focusToken();
  for (const node of document.querySelectorAll('.tok[aria-selected="true"]')) node.setAttribute("aria-selected", "false");
  if (state.lock) {
    const node = tokenAt(state.lock.side, state.lock.i);
    node.classList.add("locked");
    node.setAttribute("aria-selected", "true");
    shaded.push(node);
  }
  if (!focus) return;
  const me = tokenAt(focus.side, focus.i), rgb = headRGB(state.head), tops = state.scale === "row" ? S.rowMax(state.layer) : null;
  me.classList.add("focus");
  shaded.push(me);
  const other = focus.side === "q" ? S.n : S.m;
  for (let x = 0; x < other; x++) {
    const i = focus.side === "q" ? focus.i : x, j = focus.side === "q" ? x : focus.i;
    const w = S.weight(state.layer, state.head, i, j), r = tops ? tops[state.head * S.m + i] || 1 : 1;
    if (w <= 0) continue;
    const node = tokenAt(focus.side === "q" ? "k" : "q", x);
    node.style.backgroundColor = rgba(rgb, Math.min(1, w / r) * 0.6);
    shaded.push(node);
  }
}

function headCaption() {
  const S = current(), heads = state.heads.filter((h) => h !== ATTR), kv = DOC.G !== DOC.tau && state.head !== ATTR;
  const names = [heads.length === DOC.tau ? `all ${DOC.tau} heads` : heads.length ? `head${heads.length > 1 ? "s" : ""} ${heads.join(", ")}` : ""];
  if (state.heads.includes(ATTR)) names.push(headName(ATTR));
  const shown = names.filter(Boolean).join(" and ") + (state.started && heads.join() === state.started.join() &&
    heads.length < DOC.tau ? ` (the ${heads.length} that differ most; "all" shows every head)` : "");
  let text = `${layerText(true)}${shown[0].toUpperCase()}${shown.slice(1)}. A line joins query i (left) to key j (right); its opacity is the weight. ` +
    "Hover or focus a token to keep only its row (a query) or its column (a key); click it to keep that; click again to release.";
  if (state.heads.includes(ATTR)) text += ` The attribution's lines are in the text colour; their opacity is the query's share of it (${DOC.attribution.method}).`;
  if (DOC.cross) text += " Queries come from the text, keys from the context.";
  if (S.nc) text += ` Each query sees the ${S.nc} most recent keys (the window).`;
  if (OFFSET) text += " Each written token sits level with its own position among the keys, so its lines run up to what it read.";
  if (kv) text += ` Grouped-query attention: head ${state.head} reads key/value head ${DOC.kv[state.head]} (of ${DOC.G}).`;
  $("head-caption").textContent = text;
}

function onTokenEvent(event) {
  const node = event.target.closest(".tok");
  if (!node) return;
  const side = node.dataset.side, i = Number(node.dataset.i);
  const same = state.hover && state.hover.side === side && state.hover.i === i;
  if (event.type === "mouseover") { if (!same) { state.hover = { side, i }; renderHead(); } }
  else if (event.type === "click") { clickToken(side, i); }
  else if (event.type === "focusin" && node.matches(":focus-visible")) { state.hover = { side, i }; renderHead(); }
}

function clickToken(side, i) {
  const same = state.lock && state.lock.side === side && state.lock.i === i;
  state.lock = same ? null : { side, i };
  if (!same && side === "q") state.cell.i = i;
  if (!same && side === "k") { const t = current().slot(state.cell.i, i); if (t >= 0) state.cell.t = t; }
  render();
}

function onTokenKey(event) {
  const node = event.target.closest(".tok");
  if (!node) return;
  const S = current(), side = node.dataset.side, i = Number(node.dataset.i), count = side === "q" ? S.m : S.n;
  let next = null, nextSide = side;
  if (event.key === "ArrowDown") next = Math.min(count - 1, i + 1);
  else if (event.key === "ArrowUp") next = Math.max(0, i - 1);
  else if (event.key === "Home") next = 0;
  else if (event.key === "End") next = count - 1;
  else if (event.key === "ArrowRight" && side === "q") { nextSide = "k"; next = Math.min(S.n - 1, i + OFFSET); }
  else if (event.key === "ArrowLeft" && side === "k") { nextSide = "q"; next = Math.max(0, Math.min(S.m - 1, i - OFFSET)); }
  else if (event.key === "Enter" || event.key === " ") { event.preventDefault(); clickToken(side, i); return; }
  else if (event.key === "Escape") { state.lock = null; state.hover = null; render(); return; }
  if (next === null) return;
  event.preventDefault();
  node.tabIndex = -1;
  const target = tokenAt(nextSide, next);
  target.tabIndex = 0;
  target.focus();
  target.scrollIntoView({ block: "nearest" });
  state.hover = { side: nextSide, i: next };
  renderHead();
  announce(`${nextSide === "q" ? "query" : "key"} ${next}: ${target.textContent}`);
}

function setupHeadView() {
  for (const id of ["hv-q", "hv-k"]) {
    const box = $(id);
    box.addEventListener("mouseover", onTokenEvent);
    box.addEventListener("click", onTokenEvent);
    box.addEventListener("focusin", onTokenEvent);
    box.addEventListener("keydown", onTokenKey);
    box.addEventListener("mouseleave", () => { state.hover = null; renderHead(); });
    box.addEventListener("focusout", (e) => { if (!box.contains(e.relatedTarget)) { state.hover = null; renderHead(); } });
  }
  let pending = false;
  $("hv-scroll").addEventListener("scroll", () => {
    if (pending) return;
    pending = true;
    requestAnimationFrame(() => { pending = false; if (state.view === "head") drawHeadView(); });
  });
}

function renderHead() {
  if (state.view !== "head") return;
  drawHeadView();
  shadeTokens();
}
