"""The Attention tab: a dynamic TensorBoard plugin (an ES module served by the plugin, no network access).

It reads the core's ``attention`` records (``mha_project/attention/__init__.py``), which the training callback
writes every epoch. Routes, under ``/data/plugin/attention/`` (the tab's address: ``#attention``): ``index.js``
(the page), ``runs`` (every run with such records: its label, probes and logged steps) and ``data?run=R&step=S``
(the probes of run R at step S, in the head view's own format). Everything is read through TensorBoard's data
provider, so the tab works for any logdir TensorBoard can read."""

from __future__ import annotations

import base64
import json

from tensorboard import plugin_util
from tensorboard.backend import http_util
from tensorboard.data import provider
from tensorboard.plugins import base_plugin
from werkzeug import wrappers

from mha_project.attention import ATTENTION_PLUGIN, CAPTION, WEIGHTS
from mha_project.extras.head_view.assets import MIN_WEIGHT, asset


class AttentionPlugin(base_plugin.TBPlugin):
    plugin_name = ATTENTION_PLUGIN

    def __init__(self, context):
        self._data = context.data_provider

    def get_plugin_apps(self):
        return {"/index.js": self._serve_js, "/runs": self._serve_runs, "/data": self._serve_data}

    def is_active(self):
        return False  # TensorBoard shows the tab when a run holds summaries of this plugin (data_plugin_names)

    def frontend_metadata(self):
        return base_plugin.FrontendMetadata(es_module_path="/index.js", tab_name="Attention")

    @wrappers.Request.application
    def _serve_js(self, request):
        # The head view's script, its style and minimum weight, then the tab's own part (runs, epochs).
        constants = f"const HEAD_VIEW_CSS = {json.dumps(asset('head_view.css'))};\nconst MIN_WEIGHT = {MIN_WEIGHT};\n"
        tab = asset("tensorboard_tab.js")
        body = asset("head_view.js") + constants + tab
        return http_util.Respond(request, body, "application/javascript")

    def _tensors(self, request):
        ctx = plugin_util.context(request.environ)
        experiment = plugin_util.experiment_id(request.environ)
        listing = self._data.list_tensors(ctx, experiment_id=experiment, plugin_name=ATTENTION_PLUGIN)
        return ctx, experiment, listing

    @wrappers.Request.application
    def _serve_runs(self, request):
        _ctx, _experiment, listing = self._tensors(request)
        runs = []
        for run, tags in sorted(listing.items()):
            by_step = _weight_tags(tags)
            if not by_step:
                continue
            first = next(iter(by_step[min(by_step)].values()))
            described = _described(tags[first])
            if described is None:  # a summary under this plugin's name that the project did not write
                continue
            probes = len({k for probes in by_step.values() for k in probes})
            last = max(tags[tag].max_wall_time for step in by_step.values() for tag in step.values())
            runs.append(
                {
                    "run": run,
                    "label": described.get("label", ""),
                    "probes": probes,
                    "steps": sorted(by_step),
                    "last": last,  # when it last logged: the tab opens on the newest run
                }
            )
        return http_util.Respond(request, runs, "application/json")

    @wrappers.Request.application
    def _serve_data(self, request):
        run, step = request.args.get("run", ""), request.args.get("step", "0")
        if not _whole(step):
            shown = repr(step) if len(step) <= 40 else repr(step[:40]) + "..."
            return http_util.Respond(
                request, f"step={shown} is invalid: must be a logged step, a whole number >= 0", "text/plain", code=400
            )
        step = int(step)
        ctx, experiment, listing = self._tensors(request)
        tags = listing.get(run, {})
        weight_tags = _weight_tags(tags).get(step, {})  # this step's tags alone: one step is read
        wanted = [*weight_tags.values(), *(f"attention_weights/probe_{k}/{CAPTION}/{step}" for k in weight_tags)]
        read = self._data.read_tensors(
            ctx,
            experiment_id=experiment,
            plugin_name=ATTENTION_PLUGIN,
            downsample=1,
            run_tag_filter=provider.RunTagFilter(runs=[run], tags=[t for t in wanted if t in tags]),
        ).get(run, {})
        items = []
        for k, tag in sorted(weight_tags.items()):
            if not read.get(tag):
                continue
            described = _described(tags[tag])
            if described is None:
                continue
            weights = read[tag][-1].numpy  # (layers, heads, n, n) uint8
            caption = read.get(f"attention_weights/probe_{k}/{CAPTION}/{step}")
            caption = caption[-1].numpy.item().decode("utf-8") if caption else ""
            items.append(
                {
                    "text": described.get("text", ""),
                    "caption": caption or f"step {step}",
                    "tokens": described.get("tokens", []),
                    "heads": int(weights.shape[1]),
                    "layers": [base64.b64encode(layer.tobytes()).decode("ascii") for layer in weights],
                }
            )
        return http_util.Respond(request, items, "application/json")


def _weight_tags(tags) -> dict[int, dict[int, str]]:
    """``{step: {probe: tag}}`` of the run's ``attention_weights/probe_<k>/weights/<step>`` tags; a tag of another shape
    (a summary written by something else) is left out rather than failing every run's answer."""
    found: dict[int, dict[int, str]] = {}
    for tag in tags:
        parts = tag.split("/")
        if len(parts) != 4 or parts[0] != "attention_weights" or parts[2] != WEIGHTS or not _whole(parts[3]):
            continue
        index = parts[1].removeprefix("probe_")
        if parts[1].startswith("probe_") and _whole(index):
            found.setdefault(int(parts[3]), {})[int(index)] = tag
    return found


def _whole(text: str) -> bool:
    """A step or probe number: ASCII digits, at most 18 of them (a 64-bit step; Python refuses to read
    integers of over 4,300 digits)."""
    return text.isascii() and text.isdigit() and len(text) <= 18


def _described(tag_metadata) -> dict | None:
    """What the head view's summary says of its probe (text, tokens, label); None when it is not the
    project's JSON."""
    try:
        found = json.loads(tag_metadata.plugin_content or b"{}")
    except ValueError:
        return None
    return found if isinstance(found, dict) else None
