"""Matplotlib pictures (Agg, no screen): attention heatmaps and PNG bytes for TensorBoard."""

from __future__ import annotations

import io
import warnings

import matplotlib.pyplot as plt
import numpy as np

from mha_project.atomic import write_bytes_atomic

plt.switch_backend("Agg")  # files only, never a window


# Texts are drawn as written: "$5 ... $3" in a review is money, not matplotlib mathtext (which would fail).
plt.rcParams["text.parse_math"] = False


def attention_grid(
    scores_per_layer: list[np.ndarray], tokens: list[str], title: str = "", max_tokens: int = 24, per_row: int = 4
):
    """Panels of (query row → key column) attention, ``per_row`` heads to a row, layer after layer.

    ``scores_per_layer[l]`` is ``(heads, T, T)`` for a single text. Each panel has its colour bar with a
    white line at 1/n (uniform attention over the text's n tokens). A text longer than ``max_tokens``
    shows its first ``max_tokens`` tokens, and the title says so.
    """
    n = min(len(tokens), max_tokens)
    labels = [f"{t if len(t) <= 12 else t[:11] + '…'}" for t in tokens[:n]]
    layers, heads = len(scores_per_layer), scores_per_layer[0].shape[0]
    columns = min(heads, per_row)
    rows_per_layer = -(-heads // columns)
    size = max(2.4, 0.16 * n + 1.2)
    fig, axes = plt.subplots(
        layers * rows_per_layer, columns, figsize=(size * columns, size * layers * rows_per_layer), squeeze=False
    )
    for l, layer_scores in enumerate(scores_per_layer):
        for h in range(heads):
            ax = axes[l * rows_per_layer + h // columns][h % columns]
            panel = layer_scores[h, :n, :n]
            # Colour scale from 0 to at least twice uniform attention, so uniform heads look mid-tone.
            image = ax.imshow(panel, cmap="viridis", vmin=0.0, vmax=max(2.0 / max(n, 1), float(panel.max())))
            bar = fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
            bar.ax.tick_params(labelsize=6)
            bar.ax.axhline(1.0 / max(len(tokens), 1), color="white", linewidth=1)  # uniform attention, 1/n
            bar.ax.text(1.6, 1.0 / max(len(tokens), 1), "1/n", transform=bar.ax.get_yaxis_transform(), fontsize=6)
            ax.set_title(f"layer {l} · head {h}", fontsize=8)
            ax.set_xlabel("key (attended to)", fontsize=7)
            if h % columns == 0:
                ax.set_ylabel("query →", fontsize=7)
            ax.set_xticks(range(n), labels, rotation=90, fontsize=6)
            ax.set_yticks(range(n), labels, fontsize=6)
        for h in range(heads, rows_per_layer * columns):  # empty slots of a layer's last row
            axes[l * rows_per_layer + h // columns][h % columns].axis("off")
    shown = f"first {n} of {len(tokens)} tokens" if n < len(tokens) else f"{n} tokens"
    fig.suptitle(f"{title}\n({shown}; white line on each scale: 1/n = uniform attention)", fontsize=9)
    fig.tight_layout()
    return fig


def figure_to_png(fig) -> bytes:
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # missing glyphs (e.g. Hangul without a CJK font) are drawn as boxes
        fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")  # rotated labels are never clipped
    plt.close(fig)
    return buf.getvalue()


def save_figure(fig, path) -> None:

    write_bytes_atomic(path, figure_to_png(fig))
