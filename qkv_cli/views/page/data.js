"use strict";
// qkv view: the page's data, written by qkv_cli/views/html_data.py, decoded here (no network, no library).
//   weights: 12-bit fixed point, two per three bytes, alpha = q / 4095
//   scores:  float16 of S - (the row's max over allowed keys), and that max per row in float32; where a layer
//            kept its scores, alpha = Softmax(S + Mask) is computed from them, row by row
//   compact (a large page): weights as 8 bits of the row's largest, alpha = q / 255 * rmax (q < 3 stored as 0),
//            and every field written "z:" + base64 is zlib-deflated: inflated (DecompressionStream) before drawing
//   masks:   one bit per cell, least significant bit first, 1 = removed (-inf)
//   band:    a long document under a window stores tau x m x n_c: slot t of query i is key i - n_c + 1 + t
//   attribution: its m x n values in float32 and its own mask; the page shows it as one more "head" (index tau)
//            whose cells are each row's shares of the attribution (the values themselves: attribution(i, j))

function bytesOf(text) {
  if (typeof text !== "string") return text;  // a deflated field, already inflated by inflateAll
  if (typeof Uint8Array.fromBase64 === "function") return Uint8Array.fromBase64(text);
  const s = atob(text), out = new Uint8Array(s.length);
  for (let k = 0; k < s.length; k++) out[k] = s.charCodeAt(k);
  return out;
}

function unpack12(text, count) {
  const b = bytesOf(text), out = new Float32Array(count);
  for (let k = 0, p = 0; k < count; k += 2, p += 3) {
    out[k] = ((b[p] << 4) | (b[p + 1] >> 4)) / 4095;
    if (k + 1 < count) out[k + 1] = (((b[p + 1] & 15) << 8) | b[p + 2]) / 4095;
  }
  return out;
}

async function inflate(text) {
  const stream = new Blob([bytesOf(text.slice(2))]).stream().pipeThrough(new DecompressionStream("deflate"));
  return new Uint8Array(await new Response(stream).arrayBuffer());
}

async function inflateAll(doc) {  // every "z:" field of every layer entry -> its bytes
  const jobs = [];
  for (const s of doc.sentences) {
    for (const e of s.layers) {
      for (const [k, v] of Object.entries(e)) {
        if (typeof v === "string" && v.startsWith("z:")) jobs.push(inflate(v).then((b) => { e[k] = b; }));
      }
    }
  }
  await Promise.all(jobs);
}

function unpack8(q8, rmax, tau, m, cols) {  // alpha = q / 255 * (the row's largest)
  const q = bytesOf(q8), top = floats(rmax), out = new Float32Array(tau * m * cols);
  for (let r = 0; r < tau * m; r++) for (let t = 0; t < cols; t++) out[r * cols + t] = (q[r * cols + t] / 255) * top[r];
  return out;
}

let HALF = null;
function halfTable() {  // every float16 bit pattern -> its value
  if (HALF) return HALF;
  HALF = new Float32Array(65536);
  for (let h = 0; h < 65536; h++) {
    const sign = h & 0x8000 ? -1 : 1, e = (h >> 10) & 31, f = h & 1023;
    HALF[h] = e === 0 ? sign * f * 2 ** -24 : e === 31 ? (f ? NaN : sign * Infinity) : sign * (1 + f / 1024) * 2 ** (e - 15);
  }
  return HALF;
}

function halves(text) {
  const b = bytesOf(text), t = halfTable(), out = new Float32Array(b.length >> 1);
  for (let k = 0; k < out.length; k++) out[k] = t[b[2 * k] | (b[2 * k + 1] << 8)];
  return out;
}

function floats(text) {
  const b = bytesOf(text), v = new DataView(b.buffer, b.byteOffset, b.byteLength), out = new Float32Array(b.length >> 2);
  for (let k = 0; k < out.length; k++) out[k] = v.getFloat32(4 * k, true);
  return out;
}

function maskBits(text, count) {
  const b = bytesOf(text), out = new Uint8Array(count);
  for (let k = 0; k < count; k++) out[k] = (b[k >> 3] >> (k & 7)) & 1;
  return out;
}

function softmaxRows(rel, masked, tau, m, n) {  // alpha = Softmax(S + Mask) from S - max: allowed cells are <= 0
  const out = new Float32Array(rel.length);
  for (let h = 0; h < tau; h++) {
    for (let i = 0; i < m; i++) {
      const base = (h * m + i) * n, row = i * n;
      let total = 0;
      for (let j = 0; j < n; j++) {
        if (masked[row + j]) continue;
        const e = Math.exp(rel[base + j]);
        out[base + j] = e;
        total += e;
      }
      if (total > 0) for (let j = 0; j < n; j++) out[base + j] /= total;  // a row with every key masked stays 0
    }
  }
  return out;
}

class Sentence {  // one text (a batch has several): its labels and every layer's weights, decoded when first used
  constructor(raw, doc) {
    this.name = raw.name;
    this.tokens = raw.tokens;
    this.keyTokens = raw.keys;
    this.m = raw.tokens.length;
    this.n = raw.keys.length;
    this.meta = raw.meta || null;  // an encoder-decoder: each attention (a "sentence") has its own L, tau, layers
    this.L = (raw.meta || doc).L;
    this.tau = (raw.meta || doc).tau;
    this.nc = doc.band || 0;
    this.cols = this.nc || this.n;  // stored cells per query row
    this.raw = raw.layers;
    this.stats = raw.stats;
    this.grids = raw.masks.map((t) => maskBits(t, this.m * this.n));
    this.maskOf = raw.maskOf;
    this.queryNotes = raw.queryNotes || null;  // a generation: what each written token is
    this.attr = raw.attribution || null;
    this.heads = this.tau + (this.attr ? 1 : 0);  // stored "heads" per layer: the attribution is the last one
    this.attrMask = this.attr ? maskBits(this.attr.mask, this.m * this.n) : null;
    this.A = null;  // the attribution's values, m x n
    this.W = new Array(this.L).fill(null);
    this.S = new Array(this.L).fill(null);
    this.top = new Array(this.L).fill(null);
    this.scoreTop = new Array(this.L).fill(null);
  }

  load(l) {
    if (this.W[l]) return;
    const e = this.raw[l], m = this.m, size = this.tau * m * this.cols;
    if (e.s) {
      const rel = halves(e.s), top = floats(e.top), S = new Float32Array(size), n = this.cols;
      for (let r = 0; r < this.tau * m; r++) for (let j = 0; j < n; j++) S[r * n + j] = rel[r * n + j] + top[r];
      this.S[l] = S;
      this.scoreTop[l] = top;
      if (!e.w) this.W[l] = softmaxRows(rel, this.mask(l), this.tau, m, n);
    }
    if (e.w) this.W[l] = unpack12(e.w, size);
    if (e.q8) this.W[l] = unpack8(e.q8, e.rmax, this.tau, m, this.cols);
    if (this.attr) this.W[l] = this.withAttribution(this.W[l]);
  }

  withAttribution(W) {  // the layer's weights, then the attribution's row shares as head tau
    const m = this.m, n = this.n, A = floats(this.attr.f), out = new Float32Array(this.heads * m * n);
    out.set(W);
    for (let i = 0, base = this.tau * m * n; i < m; i++) {
      let total = 0;
      for (let j = 0; j < n; j++) total += A[i * n + j];
      if (total > 0) for (let j = 0; j < n; j++) out[base + i * n + j] = A[i * n + j] / total;
    }
    this.A = A;
    return out;
  }

  attribution(i, j) { this.load(0); return this.A[i * this.n + j]; }

  sink(l, h, i) {  // attention sinks (gpt-oss): the share of query i's row the sink took, or null
    const e = this.raw[l];
    if (!e.sink || h >= this.tau) return null;
    if (!e.sinkShares) e.sinkShares = floats(e.sink);
    return e.sinkShares[h * this.m + i];
  }

  weights(l) { this.load(l); return this.W[l]; }
  mask(l) { return this.nc ? null : this.grids[this.maskOf[l]]; }
  hasScores(l) { return Boolean(this.raw[l].s); }
  coarse(l) { return Boolean(this.raw[l].q8) && !this.raw[l].s; }  // 8-bit weights: shown to 2 or 3 digits

  rowMax(l) {  // the largest weight of every row: for "weight / row max"
    if (!this.top[l]) {
      const W = this.weights(l), c = this.cols, out = new Float32Array(this.heads * this.m);
      for (let r = 0; r < out.length; r++) {
        let best = 0;
        for (let t = 0; t < c; t++) if (W[r * c + t] > best) best = W[r * c + t];
        out[r] = best;
      }
      this.top[l] = out;
    }
    return this.top[l];
  }

  slot(i, j) {  // where key j sits in query i's stored row (-1: outside the window)
    if (!this.nc) return j;
    const t = j - i + this.nc - 1;
    return t >= 0 && t < this.nc ? t : -1;
  }

  keyOf(i, t) { return this.nc ? i - this.nc + 1 + t : t; }  // the key of stored cell t (band: < 0 before the text)

  at(l, h, i, t) { return this.weights(l)[(h * this.m + i) * this.cols + t]; }

  weight(l, h, i, j) { const t = this.slot(i, j); return t < 0 ? 0 : this.at(l, h, i, t); }

  scoreDropped(l, i, t) { return this.raw[l].maskedScores === false && this.masked(l, i, t); }  // compact page

  score(l, h, i, t) {
    this.load(l);
    if (this.scoreDropped(l, i, t)) return null;
    const S = this.S[l];
    return S && h < this.tau ? S[(h * this.m + i) * this.cols + t] : null;
  }

  scoreDecimals(l, h, i, t) {  // float16 keeps ~3 significant digits of the distance to the row's largest score
    const rel = Math.abs(this.score(l, h, i, t) - this.scoreTop[l][h * this.m + i]);
    return Math.max(0, Math.min(3, 3 - Math.ceil(Math.log10(rel + 1e-9))));
  }

  masked(l, i, t, h = 0) {  // stored cell t of query i: removed by the mask (band: a slot before the text)
    if (h >= this.tau) return this.attrMask[i * this.n + t] === 1;  // the attribution: masked and exactly 0
    return this.nc ? this.keyOf(i, t) < 0 : this.mask(l)[i * this.n + t] === 1;
  }
}

const DOC = JSON.parse(document.getElementById("qkv-data").textContent);
const SENTENCES = DOC.sentences.map((raw) => new Sentence(raw, DOC));
const ATTR = DOC.attribution ? DOC.tau : -1;  // the attribution's "head" index (-1: none)
let HEADS = DOC.tau + (DOC.attribution ? 1 : 0);  // head buttons: the heads, then the attribution

function headName(h) { return h === ATTR ? `the ${DOC.attribution.label} attribution` : `head ${h}`; }
