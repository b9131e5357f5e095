// TensorBoard's Attention tab (mha_project/extras/head_view/plugin.py serves this after head_view.js):
// a run list (by the runs' labels: their swept values) and an epoch slider around the same head view.
// It opens on the run that logged last, at its last epoch; step 0 is the weights before training.
// "compare" puts a second one beside it: one run against itself shows before training against the last epoch,
// two runs (heads=1 against heads=8) each at its last epoch; each side keeps its own run, epoch, layer and head.
// The plugin page's own address (/data/plugin_entry.html?name=attention#run=2&compare&compare_run=1)
// opens a given state; TensorBoard's address holds only its own, so the tab advertises none.
const TAB_CSS = `
#compare-control { display: block; margin: 0 0 8px; font-size: 13px; }
#panels { display: flex; gap: 16px; align-items: flex-start; }
.panel { flex: 1 1 0; min-width: 0; overflow-x: auto; }
.panel[hidden] { display: none; }
`;

export async function render() {
  const base = new URL("./", import.meta.url);  // /data/plugin/attention/
  const get = async (route, params) => (await fetch(new URL(route + "?" + new URLSearchParams(params || {}), base))).json();
  const style = document.createElement("style");
  style.textContent = HEAD_VIEW_CSS + TAB_CSS;
  document.head.append(style);
  document.body.innerHTML = `<label id="compare-control"><input type="checkbox" id="compare-toggle"> compare: a second
    view beside this one (its own run and epoch)</label>
    <div id="panels"><div class="panel" id="panel-left"></div><div class="panel" id="panel-right" hidden></div></div>`;
  const runs = await get("runs");
  const address = new URLSearchParams(location.hash.slice(1));
  const runIndex = (key, fallback) => {
    const asked = Number(address.get(key));
    return address.has(key) && Number.isInteger(asked) && asked >= 0 && asked < runs.length ? asked : fallback;
  };
  const latest = runs.reduce((best, r, i) => (r.last > runs[best].last ? i : best), 0);
  let right = null;
  // After a run is picked: alone, its last epoch; a run against itself, before training | last epoch; two
  // runs, both at their last.
  const arrange = () => {
    if (!right) return left.goTo(true);
    const same = left.run() === right.run();
    return Promise.all([left.goTo(!same), right.goTo(true)]);
  };
  const left = await mountPanel(document.getElementById("panel-left"), runs, get, runIndex("run", latest), arrange);
  const toggle = document.getElementById("compare-toggle"), rightPanel = document.getElementById("panel-right");
  document.getElementById("compare-control").hidden = !left;
  if (!left) return;
  async function setCompare(on) {
    rightPanel.hidden = !on;
    if (on && !right) {
      right = await mountPanel(rightPanel, runs, get, runIndex("compare_run", left.run()), arrange);
      await arrange();
    }
    window.dispatchEvent(new Event("resize"));  // both views take the width they now have
  }
  toggle.addEventListener("change", () => setCompare(toggle.checked));
  if (address.has("compare")) { toggle.checked = true; await setCompare(true); }
}

// One head view with its own run list and epoch slider in `root`; opens on run `first` at its last epoch and
// calls `runChanged()` (which moves the sliders) when another run is picked. Returns { run(), goTo(atEnd) } (the run shown; move the
// slider to its first or last step), or null when no run logged attention.
async function mountPanel(root, runs, get, first, runChanged) {
  const view = mountHeadView(root, [], {
    minWeight: MIN_WEIGHT, title: "Attention: one head at a time, epoch by epoch", address: false,
  });
  if (!runs.length) {
    root.querySelector("#caption").textContent = "no run here logged attention (logger.attention.every_n_epochs > 0)";
    return null;
  }
  const make = (tag, props) => Object.assign(document.createElement(tag), props);
  const runSelect = make("select", { id: "run-select" });
  runs.forEach((r, i) => runSelect.append(make("option", { value: i, textContent: (r.label ? r.label + " · " : "") + r.run })));
  const slider = make("input", { type: "range", id: "epoch-slider", min: 0 });
  const epochLabel = make("span", { id: "epoch-label" });
  const runLabel = make("label"), epochControl = make("label");
  runLabel.append("run ", runSelect);
  epochControl.append("epoch ", slider, " ", epochLabel);
  root.querySelector("#host-controls").append(runLabel, epochControl);

  const current = () => runs[Number(runSelect.value)];
  let asked = 0;  // answers can arrive out of order while the slider moves: only the last one asked is shown
  async function show() {
    const run = current(), step = run.steps[Number(slider.value)], mine = ++asked;
    const last = run.steps[run.steps.length - 1];
    epochLabel.textContent = (step === 0 ? "0: before training" : step + " of " + last) + (step === 0 ? " (of " + last + ")" : "");
    const data = await get("data", { run: run.run, step });
    if (mine === asked) { view.setData(data); root.dataset.shown = run.run + "@" + step; }
  }
  function goTo(end) { slider.max = current().steps.length - 1; slider.value = end ? slider.max : 0; return show(); }
  runSelect.addEventListener("change", runChanged);
  slider.addEventListener("input", show);
  runSelect.value = first;
  await goTo(true);
  return { run: () => Number(runSelect.value), goTo };
}
