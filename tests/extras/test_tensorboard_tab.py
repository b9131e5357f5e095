"""TensorBoard's Attention tab (mha_project/extras/head_view): a real tensorboard, a real browser."""

import json
import re
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from conftest import TINY_ANY_HEADS, drive_head_view, poll, run_script, tensorboard_server, train_tiny
from mha_project.attention import ATTENTION_PLUGIN as PLUGIN_NAME

# The tab reads what the fit logs: neither the SavedModel nor attention.html is made for it.
NO_FILES = ["savedmodel.export=false", "head_view.html=false"]
LONG_PROBE = " ".join(["the coffee was great but the tea"] * 80)  # 560 words: 512 tokens at seq_len=512


@pytest.fixture(scope="module")
def long_probe_run(tmp_path_factory) -> Path:
    """A tiny run, two epochs, whose first probe is 512 tokens long."""
    run_dir = tmp_path_factory.mktemp("long_probe") / "run"
    probes = f'logger.attention.probe_texts=["{LONG_PROBE}","stale coffee"]'
    result = train_tiny(run_dir, "seq_len=512", "epochs=2", "trainer.early_stopping_patience=5", probes, *NO_FILES)
    assert result.returncode == 0, result.stderr[-3000:]
    return run_dir


@pytest.fixture(scope="module")
def attention_sweep(tmp_path_factory) -> Path:
    """A 2-job sweep (heads=1,2) that logs attention, as a default sweep does."""
    sweep = tmp_path_factory.mktemp("attention_sweep") / "s"
    overrides = ["-m", "heads=1,2", *TINY_ANY_HEADS, *NO_FILES, f"hydra.sweep.dir={sweep}"]
    result = run_script("train.py", *overrides, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    # Each job builds its own model; TensorFlow's retracing count spans the process's jobs and is no news.
    logs = result.stdout + result.stderr + "".join(p.read_text() for p in sweep.glob("*/train.log"))
    assert "tf.function retracing" not in logs
    return sweep


def _get(url: str, route: str, ready=bool):
    return poll(lambda: json.loads(urllib.request.urlopen(f"{url}/{route}", timeout=10).read()), ready, 60)


def write_malformed_summary(logdir: Path) -> None:
    """A head-view summary whose tag names no probe number, as something else might write it."""
    import tensorflow as tf

    from mha_project.attention.summaries import plugin_metadata as _metadata

    with tf.summary.create_file_writer(str(logdir)).as_default():
        tf.summary.write(
            "attention_weights/probe_notanint/weights", tf.zeros((1, 1, 2, 2), "uint8"), step=0, metadata=_metadata({})
        )


def _status(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


@pytest.mark.browser
@pytest.mark.subprocess
@pytest.mark.slow
def test_the_attention_tab_lists_runs_by_their_swept_values_and_draws_every_epoch(
    long_probe_run, attention_sweep, tmp_path, page
):
    write_malformed_summary(tmp_path / "malformed")
    spec = f"long:{long_probe_run},sweep:{attention_sweep},bad:{tmp_path / 'malformed'}"
    with tensorboard_server("--logdir_spec", spec) as url:
        listing = _get(url, "data/plugins_listing", ready=lambda p: PLUGIN_NAME in p)
        runs = _get(url, f"data/plugin/{PLUGIN_NAME}/runs", ready=lambda r: len(r) == 3)
        long_run = next(r["run"] for r in runs if r["run"].startswith("long/"))
        data = _get(url, f"data/plugin/{PLUGIN_NAME}/data?run={long_run}&step=1")
        # A bad step is a 400 naming it, never a server error.
        bad_steps = {step: _status(f"{url}/data/plugin/{PLUGIN_NAME}/data?run={long_run}&step={step}")
                     for step in ("abc", "1e3", "0x10", "nan", "", "-1")}  # fmt: skip
        malformed = _status(f"{url}/data/plugin/{PLUGIN_NAME}/data?run=bad&step=0")
        script = urllib.request.urlopen(f"{url}/data/plugin/{PLUGIN_NAME}/index.js", timeout=10).read().decode()
        newest = max(runs, key=lambda r: r["last"])
        page.goto(f"{url}/#{PLUGIN_NAME}")  # the address the README and a finished run print
        page.wait_for_selector(f"iframe[src*='plugin_entry.html?name={PLUGIN_NAME}']", state="attached", timeout=60000)
        tab_by_address = page.inner_text("body")
        page.goto("about:blank")
        page.goto(f"{url}/data/plugin_entry.html?name={PLUGIN_NAME}")  # what the tab's frame loads
        opened = page.wait_for_function("() => document.querySelector('#panel-left')?.dataset.shown").json_value()
        hint = page.inner_text("#panel-left #hint")
        index = [r["run"] for r in runs].index(long_run)
        page.goto("about:blank")  # a new load: the same page with another hash would not open again
        page.goto(f"{url}/data/plugin_entry.html?name={PLUGIN_NAME}#run={index}")
        tab = _use_the_tab(page, [r["run"] for r in runs], long_run)

    assert listing[PLUGIN_NAME]["enabled"] and listing[PLUGIN_NAME]["tab_name"] == "Attention"
    assert "No dashboards are active" not in tab_by_address
    for step, (code, body) in bad_steps.items():
        assert code == 400 and f"step={step!r} is invalid" in body, (step, code, body)
    assert malformed == (200, "[]")  # the malformed run has nothing to show; the other runs are listed above
    labels = {r["run"]: r["label"] for r in runs}
    assert labels == {long_run: "seq_len=512 epochs=2", "sweep/0/tensorboard": "heads=1",
                      "sweep/1/tensorboard": "heads=2"}  # fmt: skip
    # Step 0 is the weights before training, step k the end of epoch k (two epochs; the sweep's jobs one).
    assert all(r["steps"] == [0, 1, 2] if r["run"] == long_run else r["steps"] == [0, 1] for r in runs)
    # The tab opens on the run that logged last, at its last epoch, and advertises no address of its own.
    last_step = newest["steps"][-1]
    assert opened == f"{newest['run']}@{last_step}" and "#text=" not in hint and "hover a token" in hint

    # The data: the head view's own format, one byte per weight; each query's row still sums to about 1.
    probe = data[0]
    n, heads = len(probe["tokens"]), probe["heads"]
    assert n == 512 and heads == 2 and probe["caption"].startswith("predicted ")
    weights = (np.frombuffer(__import__("base64").b64decode(probe["layers"][0]), "uint8") / 255.0) ** 2
    rows = weights.reshape(heads, n, n).sum(-1)
    assert np.abs(rows - 1).max() < 0.05

    assert (
        not re.search(r"https?://(?!www\.w3\.org/2000/svg\b)", script)
        and "import " not in script.split("export async function render")[0]
    )
    first, last, other, left, right = (tab[k] for k in ("first epoch", "last epoch", "another run", "left", "right"))
    assert first["run"] == long_run and first["tokens"] == 512  # one element per token of the 512-token probe
    assert (first["epoch"], last["epoch"]) == (0, 2) and first["checksum"] != last["checksum"]  # the epoch moved it
    assert other["run"] != long_run and other["epoch"] == 1 and other["checksum"] != last["checksum"]
    # Compare, one run against itself: before training on the left, the last epoch on the right, side by side.
    assert (left["run"], left["epoch"], right["run"], right["epoch"]) == (long_run, 0, long_run, 2)
    assert left["lines"] == first["lines"] and right["lines"] == last["lines"]  # (both sides are narrower now)
    assert right["box"]["x"] > left["box"]["x"] + left["box"]["width"] - 1  # beside it, not below
    # Two runs: each at its last epoch.
    assert (tab["two runs"]["left"], tab["two runs"]["right"]) == (f"{long_run}@2", f"{other['run']}@1")
    # The head view's own controls inside the tab: every head at once (layers x heads), a click opens one,
    # and "save SVG" downloads the right side's picture.
    model = tab["driven"]["model"]
    assert (
        model["cells"] == len(probe["layers"]) * heads and model["shown"] and all(lines > 0 for lines in model["lines"])
    )
    assert (
        model["opened"]["view_shown"] and [model["opened"]["layer"], model["opened"]["head"]] == model["opened"]["want"]
    )
    assert tab["svg_lines"] == tab["drawn_lines"] > 0 and tab["svg_tokens"] == 2 * 512


def _use_the_tab(page, runs: list[str], long_run: str) -> dict:
    """Drag the epoch slider, pick another run, open "compare", click through the right side's head view."""

    def shown(panel: str, want: str) -> dict:
        page.wait_for_function("([s, w]) => document.querySelector(s)?.dataset.shown === w", arg=[panel, want])
        run, epoch = want.rsplit("@", 1)
        tokens = page.locator(f"{panel} #queries .token").count()
        box = page.locator(panel).bounding_box()
        return {
            "run": run,
            "epoch": int(epoch),
            "tokens": tokens,
            "checksum": page.evaluate("s => window.canvasChecksum(document.querySelector(s + ' #lines'))", panel),
            "lines": int(page.get_attribute(f"{panel} #lines", "data-drawn-lines")),
            "box": box,
        }

    left = "#panel-left"
    found = {"last epoch": shown(left, f"{long_run}@2")}  # a run opens at its last epoch
    page.eval_on_selector(f"{left} #epoch-slider", "s => { s.value = 0; s.dispatchEvent(new Event('input')); }")
    found["first epoch"] = shown(left, f"{long_run}@0")
    other_run = next(run for run in runs if run != long_run)
    page.select_option(f"{left} #run-select", value=str(runs.index(other_run)))  # the options' values: list indices
    found["another run"] = shown(left, f"{other_run}@1")
    page.select_option(f"{left} #run-select", value=str(runs.index(long_run)))
    shown(left, f"{long_run}@2")
    page.check("#compare-toggle")
    found["right"] = shown("#panel-right", f"{long_run}@2")
    found["left"] = shown(left, f"{long_run}@0")
    found["left"]["box"] = page.locator(left).bounding_box()  # now that the right side takes half the width
    found["driven"] = drive_head_view(page, "#panel-right", heads=False)  # the chips: test_head_view.py
    with page.expect_download() as download:
        page.click("#panel-right #save-svg")
    svg = Path(download.value.path()).read_text(encoding="utf-8")
    found["svg_lines"] = len(re.findall(r"<line ", svg))
    found["svg_tokens"] = len(re.findall(r"<text[^>]*>", svg))
    found["drawn_lines"] = int(page.get_attribute("#panel-right #lines", "data-drawn-lines"))
    page.select_option("#panel-right #run-select", value=str(runs.index(other_run)))
    found["two runs"] = {
        "right": shown("#panel-right", f"{other_run}@1")["run"] + "@1",
        "left": shown(left, f"{long_run}@2")["run"] + "@2",
    }
    return found


def test_one_slider_position_reads_one_step_however_many_epochs_were_logged(tmp_path):
    """The plugin asks TensorBoard's data provider for the tags of the step it shows, never the others."""
    import tensorflow as tf
    from tensorboard.backend.event_processing import data_provider, plugin_event_multiplexer
    from tensorboard.plugins import base_plugin
    from werkzeug.test import Client

    from mha_project.attention.summaries import write_attention_weights as write_head_view_summary
    from mha_project.extras.head_view.plugin import AttentionPlugin

    tokens = ["stale", "coffee", "again"]
    weights = np.full((2, 3, 3), 1 / 3)
    with tf.summary.create_file_writer(str(tmp_path / "run")).as_default():
        for epoch in range(30):
            for k in range(2):
                write_head_view_summary(k, "stale coffee again", tokens, [weights], f"epoch {epoch}", "heads=2", epoch)
    # A summary under the plugin's name whose content is not the project's JSON: left out, never a 500.
    from mha_project.attention.summaries import plugin_metadata as _metadata

    foreign = _metadata({})
    foreign.plugin_data.content = b"not json"
    with tf.summary.create_file_writer(str(tmp_path / "foreign")).as_default():
        tf.summary.write(
            "attention_weights/probe_0/weights/0", tf.zeros((1, 1, 2, 2), "uint8"), step=0, metadata=foreign
        )
    multiplexer = plugin_event_multiplexer.EventMultiplexer()
    multiplexer.AddRunsFromDirectory(str(tmp_path))
    multiplexer.Reload()
    provider = data_provider.MultiplexerDataProvider(multiplexer, str(tmp_path))
    asked = []
    read_tensors = provider.read_tensors

    def recording(ctx, **kwargs):
        asked.append(sorted(kwargs["run_tag_filter"].tags))
        return read_tensors(ctx, **kwargs)

    provider.read_tensors = recording
    plugin = AttentionPlugin(base_plugin.TBContext(data_provider=provider, logdir=str(tmp_path)))
    client = Client(plugin.get_plugin_apps()["/data"])
    answer = json.loads(client.get("/?run=run&step=17").get_data())
    assert [item["caption"] for item in answer] == ["epoch 17", "epoch 17"] and answer[0]["tokens"] == tokens
    assert asked == [
        sorted(f"attention_weights/probe_{k}/{kind}/17" for k in (0, 1) for kind in ("weights", "caption"))
    ]
    runs = json.loads(Client(plugin.get_plugin_apps()["/runs"]).get("/").get_data())
    assert [{k: v for k, v in r.items() if k != "last"} for r in runs] == [
        {"run": "run", "label": "heads=2", "probes": 2, "steps": list(range(30))}
    ]
    assert runs[0]["last"] > 0  # the wall time it last logged at: the tab opens on the newest run
    assert json.loads(client.get("/?run=run&step=30").get_data()) == []  # a step never logged: nothing
    huge = client.get("/?run=run&step=" + "9" * 5000)
    assert huge.status_code == 400 and b"is invalid: must be a logged step" in huge.get_data()
    assert json.loads(client.get("/?run=foreign&step=0").get_data()) == []
