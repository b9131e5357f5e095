"""The head view of a finished run, inline in a notebook: ``show(run, texts)``."""

from __future__ import annotations

from pathlib import Path

from mha_project.analysis.runs import load_run
from mha_project.attention.head_view import HeadView, head_view_html, head_view_items, render

__all__ = ["show", "render", "HeadView"]


def show(run, texts, title: str = "") -> HeadView:
    """The head view of a finished run (a run directory or :func:`~mha_project.analysis.runs.load_run`'s
    ``Run``) on ``texts`` (a string or a list): ``show("outputs/runs/latest", "great tea")`` in a notebook."""
    run = load_run(run, needs_attention=True) if isinstance(run, (str, Path)) else run
    texts = [texts] if isinstance(texts, str) else list(texts)
    items = head_view_items(run.model, run.vectorizer, texts, run.seq_len, run.class_names, run.truncation)
    if not items:
        raise ValueError("none of the texts has a word in the run's vocabulary: nothing to show")
    return HeadView(head_view_html(items, title or f"{Path(run.path).name}: attention head view"))
