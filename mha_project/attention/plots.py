"""Matplotlib pictures (Agg, no screen): attention heatmaps and PNG bytes for TensorBoard."""

from __future__ import annotations

import io
import warnings

import matplotlib.pyplot as plt
import numpy as np

from mha_project.atomic import write_bytes_atomic
from mha_project.attention import MIN_WEIGHT, quantize

plt.switch_backend("Agg")  # files only, never a window


# Texts are drawn as written: "$5 ... $3" in a review is money, not matplotlib mathtext (which would fail).
plt.rcParams["text.parse_math"] = False


SCALES = ("shared", "per_head")  # attention_grid(scale=...)


def label_color(image, value) -> str:
    """Black or white, whichever reads on ``image``'s colour at ``value`` (by the colour's luminance)."""
    red, green, blue, _ = image.cmap(image.norm(value))
    return "black" if 0.299 * red + 0.587 * green + 0.114 * blue > 0.5 else "white"


def attention_grid(
    scores_per_layer: list[np.ndarray],
    tokens: list[str],
    title: str = "",
    max_tokens: int = 24,
    per_row: int = 4,
    scale: str = "shared",
):
    """Panels of (query row → key column) attention, ``per_row`` heads to a row, layer after layer.

    ``scores_per_layer[l]`` is ``(heads, T, T)`` for a single text. ``scale="shared"`` (the default): one
    colour scale for every panel, so heads compare by colour; ``"per_head"``: each panel its own scale, so
    a weak head's pattern shows (but its colours mean other weights). The title says which. Each scale
    marks 1/n, uniform attention over the text's n tokens. A text longer than ``max_tokens`` shows its
    first ``max_tokens`` tokens, and the title says so.
    """
    if scale not in SCALES:
        raise ValueError(f"scale={scale!r} is invalid: must be one of {', '.join(SCALES)}")
    n = min(len(tokens), max_tokens)
    labels = [f"{t if len(t) <= 12 else t[:11] + '…'}" for t in tokens[:n]]
    layers, heads = len(scores_per_layer), scores_per_layer[0].shape[0]
    columns = min(heads, per_row)
    rows_per_layer = -(-heads // columns)
    size = max(2.6, 0.17 * n + 1.4)
    fig, axes = plt.subplots(
        layers * rows_per_layer,
        columns,
        figsize=(size * columns + 1.0, size * layers * rows_per_layer + 0.8),
        squeeze=False,
        layout="constrained",
    )
    uniform = 1.0 / max(len(tokens), 1)
    # From 0 to at least twice uniform attention, so a uniform head looks mid-tone.
    shared_top = max(2.0 * uniform, max(float(s[:, :n, :n].max()) for s in scores_per_layer))
    image = None
    for l, layer_scores in enumerate(scores_per_layer):
        for h in range(heads):
            ax = axes[l * rows_per_layer + h // columns][h % columns]
            panel = layer_scores[h, :n, :n]
            top = shared_top if scale == "shared" else max(2.0 * uniform, float(panel.max()))
            image = ax.imshow(panel, cmap="viridis", vmin=0.0, vmax=top)
            if scale == "per_head":
                _scale_bar(fig, image, [ax], uniform)
            ax.set_title(f"layer {l} · head {h}", fontsize=8)
            ax.set_xlabel("key (attended to)", fontsize=7)
            if h % columns == 0:
                ax.set_ylabel("query →", fontsize=7)
            ax.set_xticks(range(n), labels, rotation=90, fontsize=6)
            ax.set_yticks(range(n), labels, fontsize=6)
        for h in range(heads, rows_per_layer * columns):  # empty slots of a layer's last row
            axes[l * rows_per_layer + h // columns][h % columns].axis("off")
    if scale == "shared":
        _scale_bar(fig, image, axes.ravel().tolist(), uniform)
    shown = f"first {n} of {len(tokens)} tokens" if n < len(tokens) else f"{n} tokens"
    scales = "one colour scale for every head" if scale == "shared" else "each head its own colour scale"
    fig.suptitle(f"{title}\n({shown}; {scales}; white line: 1/n = uniform attention)", fontsize=9)
    return fig


def _scale_bar(fig, image, axes, uniform: float) -> None:
    """A colour bar with a white line at 1/n, labelled on the bar's other side from its ticks."""
    bar = fig.colorbar(image, ax=axes, fraction=0.046, pad=0.04, shrink=0.9)
    bar.ax.tick_params(labelsize=6)
    bar.ax.axhline(uniform, color="white", linewidth=1.2)
    bar.ax.text(-0.15, uniform, "1/n", transform=bar.ax.get_yaxis_transform(), fontsize=6, ha="right", va="center")


def figure_to_png(fig, dpi: int = 90) -> bytes:
    """PNG bytes of ``fig`` (then closed); 90 dpi keeps TensorBoard's images small, files use more."""
    buf = io.BytesIO()
    _savefig(fig, buf, format="png", dpi=dpi)
    return buf.getvalue()


def _savefig(fig, buffer, **kwargs) -> None:
    """``fig.savefig`` (then closed), with a tight box so rotated labels are never clipped."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # missing glyphs (e.g. Hangul without a CJK font) are drawn as boxes
        fig.savefig(buffer, bbox_inches="tight", **kwargs)
    plt.close(fig)


def save_figure(fig, path, dpi: int = 160) -> None:
    write_bytes_atomic(path, figure_to_png(fig, dpi=dpi))


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


FIGURE_FORMATS = ("png", "svg", "pdf")


def save_figure_as(fig, path) -> None:
    """``fig`` in the format ``path``'s extension names (PNG, SVG with its text as text, PDF), atomically."""
    fmt = str(path).rsplit(".", 1)[-1].lower()
    if fmt not in FIGURE_FORMATS:
        raise ValueError(f"{path}: the extension must be one of {', '.join('.' + f for f in FIGURE_FORMATS)}")
    buffer = io.BytesIO()
    with plt.rc_context({"svg.fonttype": "none"}):  # token labels stay <text>, searchable and editable
        _savefig(fig, buffer, format=fmt, dpi=200)
    write_bytes_atomic(path, buffer.getvalue())
