// Model view: every layer x head as a small heatmap; click one (or Enter) to open it in the head view.

let gridKey = "";

function thumbSize() {
  const room = ($("grid").parentElement.clientWidth || 900) - 40;
  return Math.max(36, Math.min(96, Math.floor(room / HEADS) - 10));
}

function buildGrid() {
  const S = current(), grid = $("grid"), size = thumbSize(), roles = S.stats.roles;
  const key = [state.sentence, state.scale, dark(), size].join("|");
  if (key === gridKey) return markGrid();
  gridKey = key;
  grid.replaceChildren();
  grid.style.gridTemplateColumns = `auto repeat(${HEADS}, auto)`;
  grid.appendChild(el("div", { class: "colh" }, DOC.L > 1 ? "layer" : ""));
  for (let h = 0; h < HEADS; h++) grid.appendChild(el("div", { class: "colh" }, h === ATTR ? DOC.attribution.label : `head ${h}`));
  const masked = cssColour("--masked");
  for (let l = 0; l < DOC.L; l++) {
    grid.appendChild(el("div", { class: "rowh" }, DOC.layerNames[l]));
    for (let h = 0; h < HEADS; h++) {
      const role = roles && h !== ATTR ? roles[l][h] : "";
      const where = DOC.L > 1 || DOC.layerNames[l] ? `layer ${DOC.layerNames[l]}, ` : "";
      const button = el("button", { type: "button", class: "thumb", tabIndex: -1, "data-l": String(l), "data-h": String(h),
        title: `${where}${headName(h)}${role ? `: ${role}` : ""}` });
      const canvas = el("canvas");
      const ctx = fitCanvas(canvas, size, size);
      ctx.imageSmoothingEnabled = S.cols > size || S.m > size;
      ctx.drawImage(heatCanvas(S, l, h, state.scale === "row", masked), 0, 0, size, size);
      const under = h === ATTR ? DOC.attribution.method : `${l}\u00b7${h}`;
      button.append(canvas, el("span", null, role ? DOC.roleShort[role.split(" (")[0]] || role : under));
      grid.appendChild(button);
    }
  }
  markGrid();
}

function markGrid() {
  for (const node of $("grid").querySelectorAll(".thumb")) {
    const on = Number(node.dataset.l) === state.layer && Number(node.dataset.h) === state.head;
    node.classList.toggle("current", on);
    node.tabIndex = on ? 0 : -1;
    if (on) node.setAttribute("aria-current", "true");
    else node.removeAttribute("aria-current");
  }
  $("model-caption").textContent = `Every layer (rows) and head (columns): queries down, ${current().nc ? "window slots" : "keys"} across. ` +
    "Click a thumbnail, or move with the arrow keys and press Enter, to open it in the head view." +
    (current().stats.roles ? " The word under each is the head's role, as qkv heads names it." : "");
}

function setupModelView() {
  const grid = $("grid");
  grid.addEventListener("click", (event) => {
    const node = event.target.closest(".thumb");
    if (!node) return;
    state.layer = Number(node.dataset.l);
    state.heads = [Number(node.dataset.h)];
    state.head = state.heads[0];
    setView("head");
  });
  grid.addEventListener("keydown", (event) => {
    const node = event.target.closest(".thumb");
    const moves = { ArrowLeft: [0, -1], ArrowRight: [0, 1], ArrowUp: [-1, 0], ArrowDown: [1, 0] };
    if (!node || !(event.key in moves)) return;
    event.preventDefault();
    const l = Math.max(0, Math.min(DOC.L - 1, Number(node.dataset.l) + moves[event.key][0]));
    const h = Math.max(0, Math.min(HEADS - 1, Number(node.dataset.h) + moves[event.key][1]));
    const next = grid.querySelector(`.thumb[data-l="${l}"][data-h="${h}"]`);
    node.tabIndex = -1;
    next.tabIndex = 0;
    next.focus();
    announce(next.title);
  });
}
