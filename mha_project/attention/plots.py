"""Matplotlib pictures (Agg, no screen): attention heatmaps, PNG bytes for TensorBoard, figure files."""

from __future__ import annotations

import io
import warnings

import matplotlib.pyplot as plt
import numpy as np

from mha_project.atomic import write_bytes_atomic

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
