// Drawing helpers: elements built as text only, the colour ramp, head colours, theme colours, heatmap images.

const $ = (id) => document.getElementById(id);

function el(tag, props, text) {  // an element; `text` is set as text, never parsed as markup
  const node = document.createElement(tag);
  if (props) {
    for (const [k, v] of Object.entries(props)) {
      if (k === "class") node.className = v;
      else if (k.startsWith("data-") || k.startsWith("aria-") || k === "role" || k === "title" || k === "dir") node.setAttribute(k, v);
      else node[k] = v;
    }
  }
  if (text !== undefined) node.textContent = text;
  return node;
}

const RAMP_STOPS = [[68, 1, 84], [72, 40, 120], [62, 74, 137], [49, 104, 142], [38, 130, 142], [31, 158, 137],
  [53, 183, 121], [109, 205, 89], [180, 222, 44], [253, 231, 37]];  // viridis, as `qkv heatmap` draws
const RAMP = (() => {
  const lut = new Uint8Array(256 * 3), last = RAMP_STOPS.length - 1;
  for (let k = 0; k < 256; k++) {
    const x = (k / 255) * last, a = Math.min(Math.floor(x), last - 1), f = x - a;
    for (let c = 0; c < 3; c++) lut[k * 3 + c] = Math.round(RAMP_STOPS[a][c] * (1 - f) + RAMP_STOPS[a + 1][c] * f);
  }
  return lut;
})();

function dark() { return window.matchMedia && window.matchMedia("(prefers-color-scheme: dark)").matches; }

function cssColour(name) {  // a theme colour as [r, g, b]
  const probe = el("span");
  probe.style.color = getComputedStyle(document.documentElement).getPropertyValue(name).trim();
  document.body.appendChild(probe);
  const rgb = getComputedStyle(probe).color.match(/\d+/g).slice(0, 3).map(Number);
  probe.remove();
  return rgb;
}

function hsl(h, s, l) {  // -> [r, g, b]
  const f = (n) => {
    const k = (n + h / 30) % 12, a = s * Math.min(l, 1 - l);
    return Math.round(255 * (l - a * Math.max(-1, Math.min(k - 3, 9 - k, 1))));
  };
  return [f(0), f(8), f(4)];
}

function gcd(a, b) { return b ? gcd(b, a % b) : a; }

function headRGB(h) {  // tau hues evenly spaced, visited with a stride so that neighbouring heads differ most
  if (h >= DOC.tau) return dark() ? [236, 236, 236] : [24, 24, 24];  // the attribution: the text colour
  const n = Math.max(1, DOC.tau);
  let k = Math.max(1, Math.round(0.38 * n));
  while (gcd(k, n) !== 1) k += 1;
  const slot = (h * k) % n, light = (n > 12 && slot % 2 ? 0.36 : 0.46) + (dark() ? 0.18 : 0);
  return hsl((slot * 360 / n + 200) % 360, 0.75, light);
}

function rgba(rgb, a) { return `rgba(${rgb[0]},${rgb[1]},${rgb[2]},${a})`; }

function fmt(x, digits) {
  if (x === null || x === undefined || Number.isNaN(x)) return "\u2013";
  if (x === -Infinity) return "\u2212\u221e";
  return x.toFixed(digits).replace("-", "\u2212");
}

function heatCanvas(S, l, h, rowScale, masked) {  // one head as an image, a pixel per stored cell (m x cols)
  const m = S.m, c = S.cols, W = S.weights(l), img = new ImageData(c, m), d = img.data;
  const top = rowScale ? S.rowMax(l) : null;
  for (let i = 0; i < m; i++) {
    const base = (h * m + i) * c, r = top ? top[h * m + i] || 1 : 1;
    for (let t = 0; t < c; t++) {
      const p = (i * c + t) * 4;
      if (S.masked(l, i, t, h)) {
        d[p] = masked[0]; d[p + 1] = masked[1]; d[p + 2] = masked[2];
      } else {
        const k = Math.round(Math.min(1, W[base + t] / r) * 255) * 3;
        d[p] = RAMP[k]; d[p + 1] = RAMP[k + 1]; d[p + 2] = RAMP[k + 2];
      }
      d[p + 3] = 255;
    }
  }
  const canvas = el("canvas");
  canvas.width = c;
  canvas.height = m;
  canvas.getContext("2d").putImageData(img, 0, 0);
  return canvas;
}

function fitCanvas(canvas, width, height) {  // size a canvas for the screen's pixel ratio; -> its 2d context
  const dpr = window.devicePixelRatio || 1;
  canvas.style.width = `${width}px`;
  canvas.style.height = `${height}px`;
  canvas.width = Math.max(1, Math.round(width * dpr));
  canvas.height = Math.max(1, Math.round(height * dpr));
  const ctx = canvas.getContext("2d");
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  return ctx;
}

function short(text, k) { return text.length > k ? `${text.slice(0, k - 1)}\u2026` : text; }
