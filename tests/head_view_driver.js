// What a person does with a head view (mha_project/extras/head_view/head_view.js), step by step, recording what each
// step drew. The tests run it inside the page with Playwright (page.evaluate), so the product script carries
// no test hook: it reads only what the page shows (the chips, the tokens, the canvases and their line counts;
// window.canvasChecksum is the tests' own, tests/conftest.py).
// `heads`: also click through the single view (the chips, "all", hovering) before the model view.
async ([selector, heads]) => {
  const root = document.querySelector(selector);
  const $ = id => root.querySelector("#" + id);
  const settle = () => new Promise(resolve => requestAnimationFrame(() => resolve()));
  const isolated = () => {
    const chip = root.querySelector("#chips .chip.isolated");
    return !chip || chip.dataset.head === "all" ? null : Number(chip.dataset.head);
  };
  // The top 2,000 rows (the first 110 tokens): reading a whole 512-token canvas after every step takes seconds.
  const record = label => ({ step: label, lines: Number($("lines").dataset.drawnLines), checksum: window.canvasChecksum($("lines"), 2000), isolated: isolated() });
  const steps = [record("default")];
  let weightsShown = null, shade = null;
  const singleHint = $("hint").textContent;
  if (heads) {
    root.querySelector('.chip[data-head="all"]').click(); steps.push(record("all heads"));
    const chips = root.querySelectorAll("#chips .chip");
    chips[chips.length > 2 ? 1 : 0].click(); steps.push(record("click head chip"));
    const query = root.querySelector("#queries .token"), key = root.querySelector("#keys .token");
    query.dispatchEvent(new MouseEvent("mouseenter")); steps.push(record("hover first query"));
    query.dispatchEvent(new MouseEvent("mouseleave"));
    key.dispatchEvent(new MouseEvent("mouseenter")); steps.push(record("hover first key"));
    weightsShown = [...root.querySelectorAll("#queries .token .w")].filter(w => w.textContent).length;
    shade = [...root.querySelectorAll("#queries .token")].map(t => t.style.background).find(b => b) || null;
    key.dispatchEvent(new MouseEvent("mouseleave"));
  }

  await settle(); await settle();  // what the steps above drew is painted: the time below is the grid's alone
  const started = performance.now();
  $("model-toggle").click();
  const modelMs = performance.now() - started;  // the script's work: every small view drawn
  await settle();
  const frameMs = performance.now() - started;  // until the next frame: the grid laid out and painted
  const cells = [...root.querySelectorAll("#model-grid .model-cell")];
  const modelHint = $("hint").textContent;
  const model = { cells: cells.length, ms: modelMs, frame_ms: frameMs, shown: !$("model-grid").hidden && $("view").hidden,
                  lines: cells.map(c => Number(c.querySelector("canvas").dataset.drawnLines)) };
  const last = cells[cells.length - 1];
  last.click();
  model.opened = { layer: Number($("layer-select").value), head: isolated(),
                   want: [Number(last.dataset.layer), Number(last.dataset.head)],
                   view_shown: !$("view").hidden && $("model-grid").hidden };
  return { model, steps, weights_shown_on_hover: weightsShown, hover_shade: shade, hints: [singleHint, modelHint],
    tokens: Number(/(\d+) tokens$/.exec($("caption").textContent)[1]),  // the data's count, from the caption
    query_elements: root.querySelectorAll("#queries .token").length,
    key_elements: root.querySelectorAll("#keys .token").length,
    heads: root.querySelectorAll("#chips .chip:not(.all)").length,
    canvas_width: $("lines").width, window_width: document.documentElement.clientWidth };
}
