"""The interactive head view: one self-contained HTML page of a model's attention (``page.py`` with
``head_view.html``, ``.js`` and ``.css``), written as the run's ``attention.html`` (``head_view.html=true``), by
``inspect_attention.py --html`` and inline in a notebook (``notebook.py``: ``show``, ``compare``); and TensorBoard's
Attention tab, the same script over every run's logged probes, epoch by epoch: the training callback's records
(``summary.py``) read back by the plugin (``plugin.py``, with ``tensorboard_tab.js``), registered through the
``tensorboard_plugins`` entry point in pyproject.toml."""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field

from omegaconf import MISSING

from mha_project.extending import ATTENTION_RECORDS, ATTENTION_VIEWS, NEXT_STEPS, RUN_FILES, SAVED_OUTPUTS, settings
from mha_project.extras.head_view.assets import PLUGIN_NAME

__all__ = ["PLUGIN_NAME"]

PAGE_FILE = "attention.html"


@dataclass
class HeadViewConfig:
    html: bool = MISSING  # attention.html in the run dir: the probes' head view


@settings("")  # a top-level group: head_view:
@dataclass
class HeadViewSettings:
    head_view: HeadViewConfig = field(default_factory=HeadViewConfig)


def write_probe_page(cfg, run_dir, model, inputs) -> None:
    """``attention.html``: the head view of the run's probes, beside ``model.keras``."""
    from mha_project.model.backbone import encoder_blocks
    from mha_project.training.stages import probes_of

    probes, labels = probes_of(cfg, inputs.data)
    if not (cfg.head_view.html and probes and encoder_blocks(model)):
        return
    from mha_project.extras.head_view.page import write_head_view

    write_head_view(
        run_dir / PAGE_FILE,
        model,
        inputs.preprocessor,
        probes,
        inputs.data.class_names,
        labels=labels,
        title=f"{run_dir.name}: {cfg.model.num_layers} layer(s) x {cfg.model.num_heads} heads, {inputs.data.name}",
    )


def write_tab_records(texts, tokens, scores, captions, run_label, step) -> None:
    from mha_project.extras.head_view.summary import write_head_view_summary

    for k, text in enumerate(texts):
        layers = [layer_scores[k] for layer_scores in scores]
        write_head_view_summary(k, text, tokens[k], layers, captions[k], run_label, step)


def lines_view(heads: str, per_layer: list[int]):
    from mha_project.extras.head_view.lines import lines_view

    return lines_view(heads, per_layer)


def open_page_step(run_dir, attention: bool) -> list[str]:
    page = run_dir / PAGE_FILE
    return [f"open {shlex.quote(str(page))} in a browser: the interactive head view"] if page.exists() else []


SAVED_OUTPUTS.append(write_probe_page)
ATTENTION_RECORDS.append(write_tab_records)
NEXT_STEPS.append(open_page_step)
RUN_FILES.append(PAGE_FILE)
ATTENTION_VIEWS["lines"] = lines_view
