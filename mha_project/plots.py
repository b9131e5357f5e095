"""Matplotlib pictures (Agg, no screen): attention heatmaps and PNG bytes for TensorBoard."""

from __future__ import annotations

import io
import warnings

import matplotlib.pyplot as plt
import numpy as np

plt.switch_backend("Agg")  # files only, never a window


def attention_grid(scores_per_layer: list[np.ndarray], tokens: list[str], title: str = "", max_tokens: int = 24):
    """One row per layer, one panel per head: who (row: query) attends to whom (column: key).

    ``scores_per_layer[l]`` is ``(heads, T, T)`` for a single text. Each panel has its colour bar with a
    white line at 1/n (uniform attention over the text's n tokens).
    """
    n = min(len(tokens), max_tokens)
    labels = [t if len(t) <= 12 else t[:11] + "…" for t in tokens[:n]]
    layers, heads = len(scores_per_layer), scores_per_layer[0].shape[0]
    size = max(2.2, 0.18 * n + 1.0)
    fig, axes = plt.subplots(layers, heads, figsize=(size * heads, size * layers), squeeze=False)
    for l, layer_scores in enumerate(scores_per_layer):
        for h in range(heads):
            ax = axes[l][h]
            panel = layer_scores[h, :n, :n]
            # Colour scale from 0 to at least twice uniform attention, so uniform heads look mid-tone.
            image = ax.imshow(panel, cmap="viridis", vmin=0.0, vmax=max(2.0 / max(n, 1), float(panel.max())))
            bar = fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
            bar.ax.tick_params(labelsize=6)
            bar.ax.axhline(1.0 / max(len(tokens), 1), color="white", linewidth=1)  # uniform attention, 1/n
            ax.set_title(f"layer {l} · head {h}", fontsize=8)
            ax.set_xlabel("key (attended to)", fontsize=7)
            if h == 0:
                ax.set_ylabel("query →", fontsize=7)
            ax.set_xticks(range(n), labels, rotation=90, fontsize=6)
            ax.set_yticks(range(n), labels, fontsize=6)
    if title:
        fig.suptitle(title, fontsize=9)
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
    from mha_project.io import write_bytes_atomic

    write_bytes_atomic(path, figure_to_png(fig))
