"""Which heads matter: validation accuracy when heads are masked out (Michel et al., 2019).

A head is masked by zeroing its slice ``W^O[h]`` of the output projection, so its output never
reaches the rest of the network. This is done in a *copy* of the trained model; the run's model is
never modified."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import tensorflow as tf

from mha_project.atomic import write_bytes_atomic, write_json_atomic, write_text_atomic
from mha_project.attention.plots import figure_to_png, label_color, plt
from mha_project.extras.analysis.finished import check_out_folder
from mha_project.extras.analysis.runs import load_run
from mha_project.model.backbone import encoder_blocks
from mha_project.model.classifier import uncompiled_copy
from mha_project.run_dir import ANALYSIS_TB


def set_head_mask(model, original_kernels: list[np.ndarray], keep: list[np.ndarray]) -> None:
    """Zero W^O[h] for every head h with keep[layer][h] == False (kernel shape (heads, d_v, d_model))."""
    for block, kernel, mask in zip(encoder_blocks(model), original_kernels, keep):
        block.attention.output_dense.kernel.assign(kernel * mask[:, None, None].astype(kernel.dtype))


def head_importance(model, dataset) -> dict:
    """Accuracy with no head masked, with each single head masked, and with all but one masked."""
    copy = uncompiled_copy(model)  # its attention kernels are masked head by head
    copy.compile(loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    kernels = [np.asarray(b.attention.output_dense.kernel.numpy()) for b in encoder_blocks(copy)]
    heads = [k.shape[0] for k in kernels]

    def accuracy(keep):
        set_head_mask(copy, kernels, keep)
        return float(copy.evaluate(dataset, verbose=0)[1])

    all_on = [np.ones(h, bool) for h in heads]
    baseline = accuracy(all_on)
    without = np.full((len(heads), max(heads)), np.nan)
    only = np.full((len(heads), max(heads)), np.nan)
    for l, n in enumerate(heads):
        for h in range(n):
            keep = [m.copy() for m in all_on]
            keep[l][h] = False
            without[l, h] = accuracy(keep)
            keep = [m.copy() for m in all_on]
            keep[l][:] = False
            keep[l][h] = True
            only[l, h] = accuracy(keep)
    set_head_mask(copy, kernels, all_on)
    return {"baseline": baseline, "without_head": without, "only_head": only, "drop_without_head": baseline - without}


def importance_figure(result: dict, title: str):
    drop = result["drop_without_head"]
    only = result["only_head"]
    layers, heads = drop.shape
    fig, axes = plt.subplots(1, 2, figsize=(2.5 + 0.9 * heads * 2, 1.6 + 0.6 * layers))
    for ax, values, name, cmap in (
        (axes[0], drop, "accuracy drop, this head masked", "Reds"),
        (axes[1], only, "accuracy, only this head kept (per layer)", "Greens"),
    ):
        im = ax.imshow(values, cmap=cmap, aspect="auto")
        for l in range(layers):
            for h in range(heads):
                if not np.isnan(values[l, h]):
                    ax.text(
                        h,
                        l,
                        f"{values[l, h]:+.3f}" if values is drop else f"{values[l, h]:.3f}",
                        ha="center",
                        va="center",
                        fontsize=7,
                        color=label_color(im, values[l, h]),  # white on the darkest cells: the largest drops
                    )
        ax.set_xticks(range(heads), [f"head {h}" for h in range(heads)], fontsize=7)
        ax.set_yticks(range(layers), [f"layer {l}" for l in range(layers)], fontsize=7)
        ax.set_title(name, fontsize=8)
        fig.colorbar(im, ax=ax, fraction=0.04)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    return fig


def run_head_importance(run_dir, out=None) -> dict:
    check_out_folder(out, "head_importance.png, .md, .json")
    run = load_run(run_dir, needs_attention=True)
    data = run.splits()
    val = run.batches(data.val_texts, data.val_labels)
    result = head_importance(run.model, val)
    out_dir = run.path / "head_importance" if out is None else Path(out)
    title = f"head importance on {len(data.val_texts)} validation texts (baseline {result['baseline']:.4f})"
    png = figure_to_png(importance_figure(result, title))
    write_bytes_atomic(out_dir / "head_importance.png", png)
    table = table_markdown(result)
    write_text_atomic(out_dir / "head_importance.md", f"# {title}\n\n{table}")
    write_json_atomic(
        out_dir / "head_importance.json", {k: (v.tolist() if hasattr(v, "tolist") else v) for k, v in result.items()}
    )

    writer = tf.summary.create_file_writer(str(run.path / "tensorboard" / ANALYSIS_TB))
    with writer.as_default(step=0):
        tf.summary.image("head_importance", tf.io.decode_png(png, channels=3)[None])
    writer.close()
    return {**result, "table": table, "out_dir": str(out_dir)}


def table_markdown(result: dict) -> str:
    lines = ["| layer | head | accuracy without it | drop | accuracy with only it |", "|---|---|---|---|---|"]
    layers, heads = result["without_head"].shape
    for l in range(layers):
        for h in range(heads):
            if not np.isnan(result["without_head"][l, h]):
                lines.append(
                    f"| {l} | {h} | {result['without_head'][l, h]:.4f} | "
                    f"{result['drop_without_head'][l, h]:+.4f} | {result['only_head'][l, h]:.4f} |"
                )
    return "\n".join(lines) + "\n"
