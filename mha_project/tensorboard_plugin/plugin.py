"""The Attention tab: a dynamic TensorBoard plugin (an ES module served by the plugin, no network access).

Routes, under ``/data/plugin/mha_attention/``: ``index.js`` (the page), ``runs`` (every run with head-view
summaries: its label, probes and logged steps) and ``data?run=R&step=S`` (the probes of run R at step S, in
the head view's own format). Everything is read through TensorBoard's data provider, so the tab works for
any logdir TensorBoard can read."""

from __future__ import annotations

import base64
import json
from importlib import resources

from tensorboard import plugin_util
from tensorboard.backend import http_util
from tensorboard.data import provider
from tensorboard.plugins import base_plugin
from werkzeug import wrappers

from mha_project.attention.head_view import MIN_WEIGHT, asset
from mha_project.attention.head_view_summary import CAPTION, WEIGHTS
from mha_project.tensorboard_plugin import PLUGIN_NAME

MAX_STEPS = 10_000  # every logged epoch (the data provider downsamples to this many)


class AttentionPlugin(base_plugin.TBPlugin):
    plugin_name = PLUGIN_NAME

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
        tab = resources.files(__package__).joinpath("tensorboard_tab.js").read_text(encoding="utf-8")
        body = asset("head_view.js") + constants + tab
        return http_util.Respond(request, body, "application/javascript")

    def _tensors(self, request):
        ctx = plugin_util.context(request.environ)
        experiment = plugin_util.experiment_id(request.environ)
        listing = self._data.list_tensors(ctx, experiment_id=experiment, plugin_name=PLUGIN_NAME)
        return ctx, experiment, listing

    @wrappers.Request.application
    def _serve_runs(self, request):
        ctx, experiment, listing = self._tensors(request)
        captions = self._data.read_tensors(
            ctx,
            experiment_id=experiment,
            plugin_name=PLUGIN_NAME,
            downsample=MAX_STEPS,
            run_tag_filter=provider.RunTagFilter(
                tags=[t for tags in listing.values() for t in tags if _is(t, CAPTION)]
            ),
        )
        runs = []
        for run, tags in sorted(listing.items()):
            weights = _probe_tags(tags)
            if not weights:
                continue
            described = json.loads(tags[weights[0]].plugin_content or b"{}")
            steps = sorted({d.step for series in captions.get(run, {}).values() for d in series})
            runs.append({"run": run, "label": described.get("label", ""), "probes": len(weights), "steps": steps})
        return http_util.Respond(request, runs, "application/json")

    @wrappers.Request.application
    def _serve_data(self, request):
        run, step = request.args.get("run", ""), request.args.get("step", "0")
        if not step.isascii() or not step.isdigit():
            return http_util.Respond(
                request, f"step={step!r} is invalid: must be a logged step, a whole number >= 0", "text/plain", code=400
            )
        step = int(step)
        ctx, experiment, listing = self._tensors(request)
        tags = listing.get(run, {})
        read = self._data.read_tensors(
            ctx,
            experiment_id=experiment,
            plugin_name=PLUGIN_NAME,
            downsample=MAX_STEPS,
            run_tag_filter=provider.RunTagFilter(runs=[run], tags=list(tags)),
        ).get(run, {})
        items = []
        for tag in _probe_tags(tags):
            at_step = {d.step: d.numpy for d in read.get(tag, [])}
            captions = {d.step: d.numpy for d in read.get(tag[: -len(WEIGHTS)] + CAPTION, [])}
            if step not in at_step:
                continue
            described = json.loads(tags[tag].plugin_content or b"{}")
            weights = at_step[step]  # (layers, heads, n, n) uint8
            caption = captions.get(step)
            items.append(
                {
                    "text": described.get("text", ""),
                    "caption": (caption.item().decode("utf-8") if caption is not None else "") or f"step {step}",
                    "tokens": described.get("tokens", []),
                    "heads": int(weights.shape[1]),
                    "layers": [base64.b64encode(layer.tobytes()).decode("ascii") for layer in weights],
                }
            )
        return http_util.Respond(request, items, "application/json")


def _is(tag: str, kind: str) -> bool:
    return tag.startswith("head_view/probe_") and tag.endswith("/" + kind)


def _probe_tags(tags) -> list[str]:
    """The runs' head-view weight tags in probe order; a tag that is not ``head_view/probe_<k>/weights`` (a
    summary written by something else) is left out rather than failing every run's answer."""
    return sorted((t for t in tags if _is(t, WEIGHTS) and _probe_index(t) is not None), key=_probe_index)


def _probe_index(tag: str) -> int | None:
    index = tag.split("/")[1].removeprefix("probe_")
    return int(index) if index.isascii() and index.isdigit() else None
