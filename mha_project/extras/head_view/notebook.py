"""The head view of a finished run, inline in a notebook: ``show(run, texts)``."""

from __future__ import annotations

from pathlib import Path

from mha_project.errors import UserError
from mha_project.extras.analysis.runs import as_run
from mha_project.extras.head_view.page import HeadView, compare_html, head_view_html, head_view_items, render

__all__ = ["show", "compare", "render", "HeadView"]


def heads_title(cfg) -> str:
    """``1 layer(s) x 4 heads``: a run's encoder in a title."""
    backbone = cfg.model.backbone
    return f"{backbone.num_layers} layer(s) x {backbone.num_heads} heads"


def show(run, texts, title: str = "") -> HeadView:
    """The head view of a finished run (a run directory or :func:`~mha_project.extras.analysis.runs.load_run`'s
    ``Run``) on ``texts`` (a string or a list): ``show("outputs/runs/latest", "great tea")`` in a notebook."""
    run = as_run(run, needs_attention=True)
    texts = [texts] if isinstance(texts, str) else list(texts)
    items = head_view_items(run.model, run.preprocessor, texts, run.class_names)
    if not items:
        raise UserError("none of the texts has a word in the run's vocabulary: nothing to show")
    return HeadView(head_view_html(items, title or f"{Path(run.path).name}: attention head view"))


def compare(left, right, texts, right_texts=None, titles=None) -> HeadView:
    """Two runs side by side on the same texts (``compare("outputs/runs/heads1", "outputs/runs/heads8", "great
    tea")``), or on other texts (``right_texts``); ``left`` and ``right``: run directories or ``Run`` objects."""
    runs = [as_run(r, needs_attention=True) for r in (left, right)]
    texts = [texts] if isinstance(texts, str) else list(texts)
    right_texts = (
        texts if right_texts is None else ([right_texts] if isinstance(right_texts, str) else list(right_texts))
    )
    sides = [
        head_view_items(run.model, run.preprocessor, side_texts, run.class_names)
        for run, side_texts in zip(runs, (texts, right_texts))
    ]
    if not all(sides):
        raise UserError("a side has no text with a word in its run's vocabulary: nothing to compare")
    titles = titles or [f"{Path(run.path).name}: {heads_title(run.cfg)}" for run in runs]
    return HeadView(compare_html(*sides, titles=tuple(titles), title=" | ".join(titles)), height=900)
