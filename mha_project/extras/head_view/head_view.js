// The head view: queries left, keys right, a line per attention weight. One implementation for two hosts:
// the standalone attention.html (head_view.html inlines this file and its data) and the TensorBoard
// plugin's tab (plugin.py beside this file, with tensorboard_tab.js: a run list and an epoch slider).
"use strict";

const HEAD_VIEW_COLOURS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
                           "#bcbd22", "#17becf", "#393b79", "#637939", "#8c6d31", "#843c39", "#7b4173", "#3182bd"];

// The help line of each view; the address part only where the page's own address is the one a person sees
// (attention.html), not inside TensorBoard, whose address holds its own state.
function headViewHint(model, minWeight, address) {
  if (model) return "every layer and head at once, one small view each · click a cell to open that layer and head";
  return `one head at a time (click "all" to overlay every head) · hover a token: left = whom it attends to,
   right = who attends to it, with the weights, shaded in the head's colour · lines below ${minWeight} hidden` +
    (address ? ` · address: <code>#text=1&amp;layer=0&amp;head=2&amp;hover=q13</code> opens that view
   (<code>head=all</code>: every head overlaid; <code>view=model</code>: every layer and head side by side)` : "");
}

function headViewMarkup(title, minWeight) {
  const esc = s => String(s).replace(/[&<>"]/g, c => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" })[c]);
  return `<header>
 <h1>${esc(title)}</h1>
 <div class="controls">
  <span id="host-controls"></span>
  <label>text <select id="text-select"></select></label>
  <label>layer <select id="layer-select"></select></label>
  <span>head <span id="chips"></span></span>
  <span class="chip model" id="model-toggle" title="every layer and head at once; click one to open it">every head</span>
  <span class="chip model" id="save-svg" title="the current view as an SVG file (drawn here, nothing is sent)">save SVG</span>
  <span class="hint" id="hint"></span>
 </div>
 <div id="caption"></div>
 <div id="text-full"></div>
</header>
<div id="view-titles"><span class="title-q">queries: each token attends…</span><span class="title-k">…to these keys</span></div>
<div id="view">
 <div class="col left" id="queries"></div>
 <canvas id="lines" width="300" height="10"></canvas>
 <div class="col right" id="keys"></div>
</div>
<div id="model-grid" hidden></div>`;
}

// Draws `data` (a list of texts: tokens, caption, heads, layers of base64 one-byte weights) into `root`.
// Returns { setData(data) }: a host swaps the texts (another run, another epoch) in place, keeping the text,
// layer and head the reader chose. Each drawing says how many lines it drew (canvas data-drawn-lines).
function mountHeadView(root, data, options) {
  const MIN_WEIGHT = options.minWeight, ROW = 18;
  let DATA = data, WIDTH = 300, cache = {};
  // isolated: a head, or null = all; model: every layer x head as small views (bertviz's model view)
  const state = { text: 0, layer: 0, isolated: 0, hover: null, model: false };
  root.innerHTML = headViewMarkup(options.title, MIN_WEIGHT);
  const $ = id => root.querySelector("#" + id);  // this view's own elements: a page may hold others

  function weights(t, l) {  // Float32Array (heads * n * n), decoded once per text and layer
    const key = t + "/" + l;
    if (!cache[key]) {
      const raw = atob(DATA[t].layers[l]);
      const w = new Float32Array(raw.length);
      for (let i = 0; i < raw.length; i++) { const q = raw.charCodeAt(i) / 255; w[i] = q * q; }
      cache[key] = w;
    }
    return cache[key];
  }
  function heads() {
    const all = [...Array(DATA[state.text].heads).keys()];
    return state.isolated === null ? all : [state.isolated];
  }
  function el(tag, cls, text) { const e = document.createElement(tag); if (cls) e.className = cls; if (text !== undefined) e.textContent = text; return e; }

  function buildTexts() {
    const textSelect = $("text-select");
    textSelect.replaceChildren(...DATA.map((d, t) => { const o = el("option", "", t + ": " + d.text.slice(0, 50)); o.value = t; return o; }));
    textSelect.value = state.text;
  }

  function buildText() {
    const item = DATA[state.text], n = item.tokens.length;
    $("caption").textContent = item.caption + " · " + n + " tokens";
    $("text-full").textContent = item.text;
    const layerSelect = $("layer-select");
    layerSelect.replaceChildren(...item.layers.map((_, l) => { const o = el("option", "", "layer " + l); o.value = l; return o; }));
    layerSelect.value = state.layer;
    const all = el("span", "chip all", "all"); all.dataset.head = "all"; all.title = "every head, overlaid";
    all.addEventListener("click", () => showHead(null));
    $("chips").replaceChildren(...[...Array(item.heads).keys()].map(h => {
      const c = el("span", "chip", String(h)); c.dataset.head = h; c.style.background = HEAD_VIEW_COLOURS[h % HEAD_VIEW_COLOURS.length];
      c.title = "head " + h; c.addEventListener("click", () => showHead(h)); return c;
    }), all);
    for (const side of ["queries", "keys"]) {
      $(side).replaceChildren(...item.tokens.map((tok, i) => {
        const t = el("div", "token " + (side === "queries" ? "q" : "k"));
        const pos = el("span", "pos", String(i));
        const weight = el("span", "w", "");
        if (side === "queries") { t.append(weight, tok, pos); } else { t.append(pos, tok, weight); }
        t.dataset.index = i;
        t.addEventListener("mouseenter", () => { state.hover = { side, index: i }; draw(); });
        t.addEventListener("mouseleave", () => { state.hover = null; draw(); });
        return t;
      }));
    }
    layout();
  }

  function layout() {  // the lines use the width the two token columns leave (the weights' room kept free)
    const n = DATA[state.text].tokens.length, canvas = $("lines");
    const used = $("queries").offsetWidth + $("keys").offsetWidth;
    WIDTH = Math.max(200, Math.min(1600, (root.clientWidth || document.documentElement.clientWidth) - used - 120));
    canvas.width = WIDTH; canvas.height = Math.max(ROW, n * ROW);
    canvas.style.width = WIDTH + "px"; canvas.style.height = canvas.height + "px";
  }

  function showHead(h) { state.isolated = h; state.model = false; draw(); }

  // One head's lines as every view draws them: [query, key] pairs in ten opacity steps (step b drawn at
  // opacity b / 10 + 0.15), weights under `threshold` left out, and while a token is hovered only its lines.
  function lineSteps(w, h, n, threshold, hover) {
    const steps = Array.from({ length: 10 }, () => []), base = h * n * n;
    for (let i = 0; i < n; i++) {
      if (hover && hover.side === "queries" && hover.index !== i) continue;
      for (let j = 0; j < n; j++) {
        if (hover && hover.side === "keys" && hover.index !== j) continue;
        const v = w[base + i * n + j];
        if (v >= threshold) steps[Math.min(9, Math.floor(v * 10))].push(i, j);
      }
    }
    return steps;
  }
  const opacityOf = step => Math.min(1, step / 10 + 0.15);
  const lineCount = steps => steps.reduce((sum, pairs) => sum + pairs.length / 2, 0);
  // Hovering shows the faint lines too: the weights beside the tokens say how small they are.
  const threshold = () => (state.hover ? 0.005 : MIN_WEIGHT);

  function showModel(on) { state.model = on; draw(); }

  function drawModel() {  // one small canvas per layer and head: the same lines, no token labels
    const item = DATA[state.text], n = item.tokens.length, SIZE = 150, grid = $("model-grid");
    const cells = [];
    item.layers.forEach((_, l) => {
      const w = weights(state.text, l);
      for (let h = 0; h < item.heads; h++) {
        const cell = el("div", "model-cell"), canvas = el("canvas");
        canvas.width = SIZE; canvas.height = SIZE;
        const ctx = canvas.getContext("2d"), step = SIZE / Math.max(n, 1);
        const steps = lineSteps(w, h, n, MIN_WEIGHT, null);
        ctx.strokeStyle = HEAD_VIEW_COLOURS[h % HEAD_VIEW_COLOURS.length]; ctx.lineWidth = 0.7;
        steps.forEach((pairs, b) => {
          if (!pairs.length) return;
          ctx.globalAlpha = opacityOf(b); ctx.beginPath();
          for (let k = 0; k < pairs.length; k += 2) { ctx.moveTo(0, (pairs[k] + 0.5) * step); ctx.lineTo(SIZE, (pairs[k + 1] + 0.5) * step); }
          ctx.stroke();
        });
        canvas.dataset.drawnLines = lineCount(steps);
        cell.dataset.layer = l; cell.dataset.head = h; cell.title = "layer " + l + " · head " + h + ": click to open";
        cell.append(el("div", "model-title", "L" + l + " H" + h), canvas);
        cell.addEventListener("click", () => {
          state.layer = l; $("layer-select").value = l; showHead(h);
        });
        cells.push(cell);
      }
    });
    grid.style.gridTemplateColumns = "repeat(" + item.heads + ", " + (SIZE + 8) + "px)";
    grid.replaceChildren(...cells);
  }

  function draw() {
    $("view").hidden = $("view-titles").hidden = state.model;
    $("model-grid").hidden = !state.model;
    $("model-toggle").classList.toggle("isolated", state.model);
    $("hint").innerHTML = headViewHint(state.model, MIN_WEIGHT, options.address !== false);
    if (state.model) { drawModel(); return; }
    const item = DATA[state.text], n = item.tokens.length, w = weights(state.text, state.layer);
    const canvas = $("lines"), ctx = canvas.getContext("2d");
    ctx.clearRect(0, 0, canvas.width, canvas.height);
    const shown = heads();
    root.querySelectorAll("#chips .chip").forEach(c => {
      const h = c.dataset.head === "all" ? null : Number(c.dataset.head);
      c.classList.toggle("off", h !== null && !shown.includes(h));
      c.classList.toggle("isolated", state.isolated === h);
    });
    const shade = new Float32Array(n);  // the other side's tokens while hovering: the shown heads' mean weight
    if (state.hover) {
      const { side, index } = state.hover;
      for (const h of shown) for (let k = 0; k < n; k++) {
        shade[k] += w[h * n * n + (side === "queries" ? index * n + k : k * n + index)] / shown.length;
      }
    }
    let drawn = 0;
    ctx.lineWidth = 1.5;
    for (const h of shown) {
      // one path per opacity step: thousands of lines in a few strokes
      const steps = lineSteps(w, h, n, threshold(), state.hover);
      drawn += lineCount(steps);
      ctx.strokeStyle = HEAD_VIEW_COLOURS[h % HEAD_VIEW_COLOURS.length];
      steps.forEach((pairs, b) => {
        if (!pairs.length) return;
        ctx.globalAlpha = opacityOf(b);
        ctx.beginPath();
        for (let k = 0; k < pairs.length; k += 2) {
          ctx.moveTo(0, pairs[k] * ROW + ROW / 2);
          ctx.lineTo(WIDTH, pairs[k + 1] * ROW + ROW / 2);
        }
        ctx.stroke();
      });
    }
    ctx.globalAlpha = 1;
    canvas.dataset.drawnLines = drawn;
    const other = state.hover ? (state.hover.side === "queries" ? "keys" : "queries") : null;
    // One head: its own colour; every head overlaid: a neutral grey, as no single head's colour would be true.
    const hex = shown.length === 1 ? HEAD_VIEW_COLOURS[shown[0] % HEAD_VIEW_COLOURS.length] : "#7f7f7f";
    const rgb = [1, 3, 5].map(k => parseInt(hex.slice(k, k + 2), 16)).join(", ");
    for (const side of ["queries", "keys"]) {
      $(side).querySelectorAll(".token").forEach((t, i) => {
        const active = state.hover && state.hover.side === side && state.hover.index === i;
        const v = side === other ? Math.sqrt(shade[i]) : 0;
        t.style.background = active ? "#ffe08a" : (v > 0 ? "rgba(" + rgb + ", " + v.toFixed(3) + ")" : "");
        t.querySelector(".w").textContent = side === other && shade[i] >= 0.005 ? shade[i].toFixed(2) : "";
      });
    }
  }

  function fromAddress() {
    const params = new URLSearchParams(location.hash.slice(1));
    const int = (k, d, max) => { const v = parseInt(params.get(k), 10); return Number.isInteger(v) && v >= 0 && v < max ? v : d; };
    state.text = int("text", 0, DATA.length);
    state.layer = int("layer", 0, DATA[state.text].layers.length);
    state.isolated = params.get("head") === "all" ? null : int("head", 0, DATA[state.text].heads);
    state.model = params.get("view") === "model";
    const hover = /^([qk])(\d+)$/.exec(params.get("hover") || "");  // hover=q3: as if the mouse were on query 3
    if (hover && Number(hover[2]) < DATA[state.text].tokens.length) {
      state.hover = { side: hover[1] === "q" ? "queries" : "keys", index: Number(hover[2]) };
    }
  }

  function svgOfView() {  // the lines as drawn now (heads, hover), tokens as text: a figure for a paper
    const item = DATA[state.text], n = item.tokens.length, w = weights(state.text, state.layer);
    const esc = s => String(s).replace(/[&<>"]/g, c => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" })[c]);
    const X0 = 160, X1 = 460, parts = [];
    for (const h of heads()) {
      lineSteps(w, h, n, threshold(), state.hover).forEach((pairs, b) => {
        for (let k = 0; k < pairs.length; k += 2) {
          const [i, j] = [pairs[k], pairs[k + 1]];
          parts.push(`<line x1="${X0}" y1="${i * ROW + ROW / 2}" x2="${X1}" y2="${j * ROW + ROW / 2}" stroke="${HEAD_VIEW_COLOURS[h % HEAD_VIEW_COLOURS.length]}" stroke-opacity="${opacityOf(b).toFixed(2)}" stroke-width="1.5"/>`);
        }
      });
    }
    item.tokens.forEach((t, i) => {
      parts.push(`<text x="${X0 - 6}" y="${i * ROW + ROW / 2 + 4}" text-anchor="end">${esc(t)}</text>`);
      parts.push(`<text x="${X1 + 6}" y="${i * ROW + ROW / 2 + 4}">${esc(t)}</text>`);
    });
    return `<svg xmlns="http://www.w3.org/2000/svg" width="620" height="${n * ROW + 4}" font-family="sans-serif" font-size="12">${parts.join("")}</svg>`;
  }

  function saveSvg() {
    const link = el("a");
    link.href = URL.createObjectURL(new Blob([svgOfView()], { type: "image/svg+xml" }));
    link.download = `attention_text${state.text}_layer${state.layer}_head${state.isolated === null ? "all" : state.isolated}.svg`;
    link.click();
    setTimeout(() => URL.revokeObjectURL(link.href), 1000);
  }

  function setData(newData) {
    DATA = newData; cache = {};
    if (!DATA.length) { $("caption").textContent = "no attention logged here"; return; }
    state.text = Math.min(state.text, DATA.length - 1);
    state.layer = Math.min(state.layer, DATA[state.text].layers.length - 1);
    if (state.isolated !== null && state.isolated >= DATA[state.text].heads) state.isolated = 0;
    buildTexts(); buildText(); draw();
  }

  $("text-select").addEventListener("change", e => { state.text = Number(e.target.value); state.layer = 0; state.isolated = 0; buildText(); draw(); });
  $("layer-select").addEventListener("change", e => { state.layer = Number(e.target.value); state.model = false; draw(); });
  $("model-toggle").addEventListener("click", () => showModel(!state.model));
  $("save-svg").addEventListener("click", saveSvg);
  window.addEventListener("resize", () => { if (DATA.length) { layout(); draw(); } });
  if (DATA.length) fromAddress();
  setData(DATA);
  return { setData };
}
