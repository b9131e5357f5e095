"""``inspect_attention.py --view lines``: the head view's lines as a figure for a paper (PNG, SVG, PDF)."""

from __future__ import annotations

import numpy as np

from mha_project.attention import quantize
from mha_project.attention.plots import plt  # Matplotlib as the core sets it up: Agg, texts drawn as written
from mha_project.errors import UserError
from mha_project.extras.head_view.assets import MIN_WEIGHT


def lines_view(heads: str, per_layer: list[int]):
    """The picture ``--view lines --heads HEADS`` asks for, once ``HEADS`` is checked against the run's heads."""
    chosen = chosen_heads(heads, per_layer)
    return lambda scores, tokens, caption: attention_lines(scores, tokens, chosen, caption)


def chosen_heads(heads: str, per_layer: list[int]):
    """``all`` -> None (every head, a grid); ``0:1,1:0`` -> [(0, 1), (1, 0)]; a head that does not exist is one line."""
    if heads == "all":
        return None
    chosen = []
    for part in heads.split(","):
        layer, _, head = part.partition(":")
        if (
            not (layer.isdigit() and head.isdigit())
            or int(layer) >= len(per_layer)
            or int(head) >= per_layer[int(layer)]
        ):
            raise UserError(
                f"--heads={heads} is invalid: give all or LAYER:HEAD pairs (layers 0-{len(per_layer) - 1}, "
                f"heads 0-{per_layer[0] - 1}), e.g. 0:1,0:3"
            )
        chosen.append((int(layer), int(head)))
    return chosen


def attention_lines(scores_per_layer: list[np.ndarray], tokens: list[str], heads=None, title: str = ""):
    """The head view's picture for a paper: per chosen ``(layer, head)`` a panel with the queries on the left,
    the keys on the right and a line from query i to key j, drawn as the page draws it: the one-byte
    quantisation, no line below ``MIN_WEIGHT``, opacity in ten steps of the weight (``head_view.js``).
    ``heads``: a list of ``(layer, head)``; None: every head, a layers x heads grid. One panel is about a
    journal column wide."""
    layers = [np.asarray(s) for s in scores_per_layer]
    heads = [(l, h) for l in range(len(layers)) for h in range(layers[l].shape[0])] if heads is None else list(heads)
    columns = len({h for _, h in heads}) if len({l for l, _ in heads}) > 1 else min(len(heads), 4)
    rows = int(np.ceil(len(heads) / columns))
    n = len(tokens)
    height = 0.6 + 0.17 * n
    fig, axes = plt.subplots(rows, columns, figsize=(3.3 * columns, height * rows), squeeze=False)
    colours = plt.get_cmap("tab10").colors
    for ax in axes.flat[len(heads) :]:
        ax.axis("off")
    for ax, (layer, head) in zip(axes.flat, heads):
        weights = (quantize(layers[layer][head][:n, :n]).astype("float64") / 255) ** 2  # what the page shows
        y = 1 - np.arange(n) / max(n - 1, 1)
        for i in range(n):
            for j in range(n):
                if weights[i, j] < MIN_WEIGHT:
                    continue
                opacity = min(1.0, min(int(weights[i, j] * 10), 9) / 10 + 0.15)  # the page's ten steps
                (line,) = ax.plot([0.3, 0.7], [y[i], y[j]], color=colours[head % 10], alpha=opacity, lw=1.5)
                line.set_gid(f"l{layer}h{head}q{i}k{j}")
        for i, token in enumerate(tokens):
            ax.text(0.28, y[i], token, ha="right", va="center", fontsize=8)
            ax.text(0.72, y[i], token, ha="left", va="center", fontsize=8)
        ax.set_xlim(0, 1)
        ax.set_ylim(-0.5 / max(n - 1, 1), 1 + 0.5 / max(n - 1, 1))
        ax.axis("off")
        ax.set_title(f"layer {layer} · head {head}", fontsize=9)
    if title:
        fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    return fig
