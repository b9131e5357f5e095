// TensorBoard's Attention tab (mha_project/tensorboard_plugin/plugin.py serves this after head_view.js):
// a run list (by the runs' labels: their swept values) and an epoch slider around the same head view.
export async function render() {
  const base = new URL("./", import.meta.url);  // /data/plugin/mha_attention/
  const get = async (route, params) => (await fetch(new URL(route + "?" + new URLSearchParams(params || {}), base))).json();
  const style = document.createElement("style");
  style.textContent = HEAD_VIEW_CSS;
  document.head.append(style);
  const runs = await get("runs");
  const view = mountHeadView(document.body, [], { minWeight: MIN_WEIGHT, title: "Attention: one head at a time, epoch by epoch" });
  if (!runs.length) { document.getElementById("caption").textContent = "no run here logged attention (logger.attention.every_n_epochs > 0)"; return; }

  const host = document.getElementById("host-controls");
  const runSelect = document.createElement("select");
  runSelect.id = "run-select";
  runs.forEach((r, i) => { const o = document.createElement("option"); o.value = i; o.textContent = (r.label ? r.label + " · " : "") + r.run; runSelect.append(o); });
  const slider = document.createElement("input");
  slider.type = "range"; slider.id = "epoch-slider"; slider.min = 0;
  const epochLabel = document.createElement("span");
  epochLabel.id = "epoch-label";
  const runLabel = document.createElement("label"); runLabel.append("run ", runSelect);
  const epochControl = document.createElement("label"); epochControl.append("epoch ", slider, " ", epochLabel);
  host.append(runLabel, epochControl);

  const current = () => runs[Number(runSelect.value)];
  async function show() {
    const run = current(), step = run.steps[Number(slider.value)];
    epochLabel.textContent = step + " (of " + run.steps[0] + "–" + run.steps[run.steps.length - 1] + ")";
    view.setData(await get("data", { run: run.run, step }));
  }
  function pickRun() { slider.max = current().steps.length - 1; slider.value = 0; return show(); }
  runSelect.addEventListener("change", pickRun);
  slider.addEventListener("input", show);
  const asked = Number(new URLSearchParams(location.hash.slice(1)).get("run"));  // #run=2: the third run listed
  if (Number.isInteger(asked) && asked >= 0 && asked < runs.length) runSelect.value = asked;
  await pickRun();

  if (location.hash.includes("selftest")) {  // what a person would do: drag the epoch, pick another run
    const record = label => ({ step: label, checksum: view.checksum(), tokens: document.querySelectorAll("#queries .token").length,
                               run: current().run, epoch: current().steps[Number(slider.value)] });
    const steps = [record("first epoch")];
    slider.value = slider.max; await show(); steps.push(record("last epoch"));
    if (runs.length > 1) {
      runSelect.value = (Number(runSelect.value) + 1) % runs.length; await pickRun();
      slider.value = slider.max; await show(); steps.push(record("another run"));
    }
    const out = document.getElementById("selftest");
    out.textContent = JSON.stringify({ runs: runs.map(r => ({ run: r.run, label: r.label, steps: r.steps })), steps });
    out.hidden = false;
  }
}
