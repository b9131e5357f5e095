"""An interactive attention head view: one self-contained HTML file (inline CSS and JS, no network).

bertviz's head view is the reference for this picture, but it needs PyTorch and transformers and its
users report it breaking on long inputs, so this is a small one of our own for Keras models:

* a layer selector, one coloured chip per head (click a chip to isolate that head, click again for all);
* queries on the left, keys on the right, a line from query i to key j with opacity = attention weight,
  every selected head overlaid in its colour (weights below ``MIN_WEIGHT`` are not drawn);
* hover a token on the left: whom it attends to; on the right: who attends to it (the other side's
  tokens are shaded by the weight);
* long texts (512 tokens and more) scroll; weights travel as one byte each (``sqrt`` scaled, so small
  weights keep their precision), about 1 MB per layer of four heads at 512 tokens.

The page reads ``#text=0&layer=0&head=1&hover=q3`` from its address (links to one view, and the screenshots in the
README), and ``#selftest`` makes it click through a head chip and a token and write what it drew into
``<pre id="selftest">``: that is how tests check it in a real (headless) browser.
"""

from __future__ import annotations

import base64
import html
import json
from pathlib import Path

import numpy as np

MIN_WEIGHT = 0.02  # lines for smaller weights are not drawn in the all-queries view


def encode_weights(scores: np.ndarray) -> str:
    """(heads, n, n) weights in [0, 1] -> base64 of uint8 ``round(sqrt(w) * 255)``.

    >>> import numpy as np
    >>> decode_weights(encode_weights(np.array([[[0.25, 0.75]]])), (1, 1, 2)).round(3).tolist()
    [[[0.25, 0.751]]]
    """
    q = np.round(np.sqrt(np.clip(np.asarray(scores, "float64"), 0.0, 1.0)) * 255).astype("uint8")
    return base64.b64encode(q.tobytes()).decode("ascii")


def decode_weights(data: str, shape) -> np.ndarray:
    """The inverse of :func:`encode_weights` (what the page's JavaScript does)."""
    q = np.frombuffer(base64.b64decode(data), dtype="uint8").reshape(shape)
    return (q.astype("float64") / 255) ** 2


def head_view_html(texts: list[dict], title: str = "attention head view") -> str:
    """The page for ``texts``: each a dict with ``tokens`` (n strings), ``scores`` (one ``(heads, n, n)``
    array per layer, query rows and key columns) and optional ``text`` and ``caption``."""
    payload = []
    for item in texts:
        n = len(item["tokens"])
        layers = [np.asarray(s)[:, :n, :n] for s in item["scores"]]
        payload.append(
            {
                "text": item.get("text", " ".join(item["tokens"])),
                "caption": item.get("caption", ""),
                "tokens": list(item["tokens"]),
                "heads": int(layers[0].shape[0]),
                "layers": [encode_weights(s) for s in layers],
            }
        )
    data = json.dumps(payload, ensure_ascii=False).replace("</", "<\\/")  # no "</script>" inside the data
    return (
        _TEMPLATE.replace("__TITLE__", html.escape(title))
        .replace("__MIN_WEIGHT__", str(MIN_WEIGHT))
        .replace("__DATA__", data)
    )


def write_head_view(path, model, vectorizer, texts, seq_len: int, class_names=None, title: str = "") -> Path:
    """Compute the attention of ``model`` on ``texts`` and write the page to ``path`` (atomically)."""
    from mha_project.attention import scores_for_texts
    from mha_project.data import encode, pad_batch
    from mha_project.io import write_text_atomic

    texts = [t for t, row in zip(texts, encode(list(texts), vectorizer, seq_len)) if len(row) > 0]
    if not texts:
        return None
    scores, tokens, _real = scores_for_texts(model, vectorizer, texts, seq_len)
    probs = model.predict(pad_batch(encode(texts, vectorizer, seq_len)), verbose=0)
    items = []
    for k, text in enumerate(texts):
        predicted = int(np.argmax(probs[k]))
        label = class_names[predicted] if class_names else str(predicted)
        items.append(
            {
                "text": text,
                "caption": f"predicted {label} (p={probs[k][predicted]:.2f})",
                "tokens": tokens[k],
                "scores": [layer[k] for layer in scores],
            }
        )
    path = Path(path)
    write_text_atomic(path, head_view_html(items, title or "attention head view"))
    return path


_TEMPLATE = r"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<title>__TITLE__</title>
<style>
 body { font: 14px system-ui, sans-serif; margin: 16px; color: #222; }
 header { position: sticky; top: 0; background: #fff; padding-bottom: 8px; border-bottom: 1px solid #ddd; z-index: 2; }
 h1 { font-size: 16px; margin: 0 0 6px; }
 .controls { display: flex; gap: 14px; align-items: center; flex-wrap: wrap; }
 .chip { display: inline-block; min-width: 26px; padding: 2px 6px; margin-right: 4px; border-radius: 4px;
         color: #fff; cursor: pointer; text-align: center; user-select: none; border: 2px solid transparent; }
 .chip.off { opacity: 0.25; }
 .chip.isolated { border-color: #222; }
 #text-full { margin: 6px 0 0; color: #555; max-height: 4.5em; overflow: auto; }
 #view { position: relative; display: flex; margin-top: 10px; }
 .col { display: flex; flex-direction: column; }
 .col.left { align-items: flex-end; }
 .token { height: 18px; line-height: 18px; padding: 0 6px; white-space: nowrap; cursor: default;
          font-family: ui-monospace, monospace; font-size: 12px; border-radius: 3px; }
 .token .pos { color: #999; font-size: 10px; margin: 0 3px; }
 .hint { color: #666; font-size: 12px; }
</style></head>
<body>
<header>
 <h1>__TITLE__</h1>
 <div class="controls">
  <label>text <select id="text-select"></select></label>
  <label>layer <select id="layer-select"></select></label>
  <span>heads <span id="chips"></span></span>
  <span class="hint">click a head to isolate it · hover a token: left = whom it attends to, right = who attends
   to it · lines below __MIN_WEIGHT__ hidden</span>
 </div>
 <div id="caption"></div>
 <div id="text-full"></div>
</header>
<div id="view">
 <div class="col left" id="queries"></div>
 <canvas id="lines" width="300" height="10"></canvas>
 <div class="col right" id="keys"></div>
</div>
<pre id="selftest" hidden></pre>
<script>
"use strict";
const DATA = __DATA__;
const MIN_WEIGHT = __MIN_WEIGHT__;
const ROW = 18, WIDTH = 300;
const COLOURS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
                 "#bcbd22", "#17becf", "#393b79", "#637939", "#8c6d31", "#843c39", "#7b4173", "#3182bd"];
const state = { text: 0, layer: 0, isolated: null, hover: null, drawn: 0 };
const cache = {};

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

function buildText() {
  const item = DATA[state.text], n = item.tokens.length;
  document.getElementById("caption").textContent = item.caption + " · " + n + " tokens";
  document.getElementById("text-full").textContent = item.text;
  const layerSelect = document.getElementById("layer-select");
  layerSelect.replaceChildren(...item.layers.map((_, l) => { const o = el("option", "", "layer " + l); o.value = l; return o; }));
  layerSelect.value = state.layer;
  const chips = document.getElementById("chips");
  chips.replaceChildren(...[...Array(item.heads).keys()].map(h => {
    const c = el("span", "chip", String(h)); c.dataset.head = h; c.style.background = COLOURS[h % COLOURS.length];
    c.title = "head " + h + ": click to isolate"; c.addEventListener("click", () => toggleHead(h)); return c;
  }));
  for (const side of ["queries", "keys"]) {
    const col = document.getElementById(side);
    col.replaceChildren(...item.tokens.map((tok, i) => {
      const t = el("div", "token " + (side === "queries" ? "q" : "k"));
      const pos = el("span", "pos", String(i));
      if (side === "queries") { t.append(tok, pos); } else { t.append(pos, tok); }
      t.dataset.index = i;
      t.addEventListener("mouseenter", () => { state.hover = { side, index: i }; draw(); });
      t.addEventListener("mouseleave", () => { state.hover = null; draw(); });
      return t;
    }));
  }
  const canvas = document.getElementById("lines");
  canvas.width = WIDTH; canvas.height = Math.max(ROW, n * ROW);
  canvas.style.width = WIDTH + "px"; canvas.style.height = canvas.height + "px";
}

function toggleHead(h) { state.isolated = state.isolated === h ? null : h; draw(); }

function draw() {
  const item = DATA[state.text], n = item.tokens.length, w = weights(state.text, state.layer);
  const canvas = document.getElementById("lines"), ctx = canvas.getContext("2d");
  ctx.clearRect(0, 0, canvas.width, canvas.height);
  const shown = heads();
  document.querySelectorAll(".chip").forEach(c => {
    const h = Number(c.dataset.head);
    c.classList.toggle("off", !shown.includes(h));
    c.classList.toggle("isolated", state.isolated === h);
  });
  const shade = new Float32Array(n);  // the other side's tokens while hovering
  let drawn = 0;
  ctx.lineWidth = 1.5;
  for (const h of shown) {
    // one path per opacity step: thousands of lines in a few strokes
    const buckets = Array.from({ length: 10 }, () => []);
    const base = h * n * n;
    for (let i = 0; i < n; i++) {
      if (state.hover && state.hover.side === "queries" && state.hover.index !== i) continue;
      for (let j = 0; j < n; j++) {
        if (state.hover && state.hover.side === "keys" && state.hover.index !== j) continue;
        const v = w[base + i * n + j];
        if (state.hover) { shade[state.hover.side === "queries" ? j : i] += v / shown.length; }
        if (v < (state.hover ? 0.005 : MIN_WEIGHT)) continue;
        buckets[Math.min(9, Math.floor(v * 10))].push(i, j);
        drawn++;
      }
    }
    ctx.strokeStyle = COLOURS[h % COLOURS.length];
    buckets.forEach((pairs, b) => {
      if (!pairs.length) return;
      ctx.globalAlpha = Math.min(1, (b + 1) / 10 + 0.05);
      ctx.beginPath();
      for (let k = 0; k < pairs.length; k += 2) {
        ctx.moveTo(0, pairs[k] * ROW + ROW / 2);
        ctx.lineTo(WIDTH, pairs[k + 1] * ROW + ROW / 2);
      }
      ctx.stroke();
    });
  }
  ctx.globalAlpha = 1;
  state.drawn = drawn;
  canvas.dataset.drawnLines = drawn;
  const other = state.hover ? (state.hover.side === "queries" ? "keys" : "queries") : null;
  for (const side of ["queries", "keys"]) {
    document.getElementById(side).querySelectorAll(".token").forEach((t, i) => {
      const active = state.hover && state.hover.side === side && state.hover.index === i;
      const v = side === other ? Math.sqrt(shade[i]) : 0;
      t.style.background = active ? "#ffe08a" : (v > 0 ? "rgba(31, 119, 180, " + v.toFixed(3) + ")" : "");
    });
  }
}

function fromAddress() {
  const params = new URLSearchParams(location.hash.slice(1));
  const int = (k, d, max) => { const v = parseInt(params.get(k), 10); return Number.isInteger(v) && v >= 0 && v < max ? v : d; };
  state.text = int("text", 0, DATA.length);
  state.layer = int("layer", 0, DATA[state.text].layers.length);
  state.isolated = params.has("head") ? int("head", null, DATA[state.text].heads) : null;
  const hover = /^([qk])(\d+)$/.exec(params.get("hover") || "");  // hover=q3: as if the mouse were on query 3
  if (hover && Number(hover[2]) < DATA[state.text].tokens.length) {
    state.hover = { side: hover[1] === "q" ? "queries" : "keys", index: Number(hover[2]) };
  }
  return params.has("selftest");
}

function canvasChecksum() {
  const canvas = document.getElementById("lines");
  const px = canvas.getContext("2d").getImageData(0, 0, canvas.width, canvas.height).data;
  let sum = 0;
  for (let i = 3; i < px.length; i += 4) sum = (sum + px[i] * ((i >> 2) % 9973 + 1)) % 1000000007;
  return sum;
}

function selftest() {  // what a person would do: look, click a head, hover tokens; record each picture
  const record = label => ({ step: label, lines: state.drawn, checksum: canvasChecksum(), isolated: state.isolated });
  const steps = [record("all heads")];
  const chips = document.querySelectorAll(".chip");
  chips[chips.length > 1 ? 1 : 0].click(); steps.push(record("click head chip"));
  document.querySelector("#queries .token").dispatchEvent(new MouseEvent("mouseenter")); steps.push(record("hover first query"));
  document.querySelector("#queries .token").dispatchEvent(new MouseEvent("mouseleave"));
  document.querySelector("#keys .token").dispatchEvent(new MouseEvent("mouseenter")); steps.push(record("hover first key"));
  const out = document.getElementById("selftest");
  out.textContent = JSON.stringify({
    tokens: DATA[state.text].tokens.length,
    query_elements: document.querySelectorAll("#queries .token").length,
    key_elements: document.querySelectorAll("#keys .token").length,
    heads: DATA[state.text].heads, steps });
  out.hidden = false;
}

const textSelect = document.getElementById("text-select");
textSelect.replaceChildren(...DATA.map((d, t) => { const o = el("option", "", t + ": " + d.text.slice(0, 50)); o.value = t; return o; }));
textSelect.addEventListener("change", () => { state.text = Number(textSelect.value); state.layer = 0; state.isolated = null; buildText(); draw(); });
document.getElementById("layer-select").addEventListener("change", e => { state.layer = Number(e.target.value); draw(); });
const runSelftest = fromAddress();
textSelect.value = state.text;
buildText();
draw();
if (runSelftest) selftest();
</script>
</body></html>
"""
