"""Which head does the work: activation patching per head (Meng et al. 2022; Wang et al. 2022).

Run the model on a *clean* text and on a *corrupted* one that differs where the answer is decided; then run the
corrupted text again with one head's output taken from the clean run, and measure how much of the clean-vs-corrupted
difference comes back::

    m(x)         = log p(y | x) - log p(y' | x)      y: the clean text's class, y': the corrupted run's best other
    recovered[l][h] = (mean m(patched) - mean m(corrupted)) / (mean m(clean) - mean m(corrupted))

1 means the head alone carries what the clean text adds; 0 means it carries nothing of it. Means over pairs are
taken before the ratio (as TransformerLens's patching utilities do), so a pair whose texts the model already scores
alike cannot blow the ratio up.

A head's output is its slice of the per-head context, ``softmax(QK^T/sqrt(d_k)) V`` before ``W^O``: the input
of Keras's output projection, replaced on its way in during the model's own call (:func:`patched`). Nothing of
attention is re-implemented, and the run's model is the one patched (on a copy of its call, never its weights).
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import numpy as np
import tensorflow as tf

from mha_project.atomic import write_bytes_atomic, write_json_atomic, write_text_atomic
from mha_project.attention.plots import figure_to_png, label_color, plt
from mha_project.attention.scores import attention_scores
from mha_project.errors import UserError
from mha_project.extras.analysis.finished import check_out_folder
from mha_project.extras.analysis.runs import load_run
from mha_project.extras.head_analysis.importance import head_importance
from mha_project.extras.head_analysis.patterns import model_head_patterns, relation_heads
from mha_project.model.backbone import encoder_blocks
from mha_project.run_dir import ANALYSIS_TB

METRIC = (
    "log p(clean class) - log p(best other class), means over pairs; "
    "recovered = (patched - corrupted) / (clean - corrupted)"
)


@contextlib.contextmanager
def patched(model, change):
    """Inside, every call of layer ``l``'s output projection ``W^O`` passes its input, the per-head outputs
    ``(batch, T, heads, d_v)``, through ``change(l, "heads", x)`` and its output, the layer's attention output,
    through ``change(l, "output", y)``.

    Keras's ``MultiHeadAttention`` has no public per-head output; its ``_output_dense`` is the one place where
    the heads are still apart (an instance attribute shadows its ``call`` for the duration, as a forward hook)."""
    dense_layers = [block.attention._output_dense for block in encoder_blocks(model)]
    for layer, dense in enumerate(dense_layers):
        original = dense.call

        def call(heads, *args, _layer=layer, _original=original, **kwargs):
            heads = change(_layer, "heads", heads)
            return change(_layer, "output", _original(heads, *args, **kwargs))

        dense.call = call
    try:
        yield
    finally:
        for dense in dense_layers:
            del dense.call


def forward(model, token_ids, change=None):
    """Class log-probabilities of ``token_ids`` (eager, inference) and every layer's per-head outputs and
    attention outputs as the forward pass made them, with ``change`` applied (see :func:`patched`)."""
    seen: dict = {}

    def record(layer, side, value):
        value = value if change is None else change(layer, side, value)
        seen[(layer, side)] = value
        return value

    with patched(model, record):
        probs = model(token_ids, training=False)
    return np.log(np.clip(np.asarray(probs, "float64"), 1e-30, None)), seen


def logit_difference(log_probs: np.ndarray, labels: np.ndarray, others: np.ndarray) -> np.ndarray:
    rows = np.arange(len(labels))
    return log_probs[rows, labels] - log_probs[rows, others]


def clean_into(clean: dict, layer: int, heads: list[int] | None):
    """A ``change`` (:func:`patched`) that puts the clean run's outputs of ``heads`` of ``layer`` in place of the
    running ones (``None``: the layer's whole attention output, after ``W^O``); ``clean`` is :func:`forward`'s
    record of the clean run."""

    def change(l, side, value):
        if l != layer:
            return value
        if heads is None:
            return clean[(l, "output")] if side == "output" else value
        if side == "output":
            return value
        mask = np.zeros(value.shape[2], "float32")
        mask[heads] = 1.0
        mask = tf.constant(mask, value.dtype)[None, None, :, None]
        return value * (1 - mask) + tf.cast(clean[(l, "heads")], value.dtype) * mask

    return change


def head_patching(model, clean_ids: np.ndarray, corrupted_ids: np.ndarray, labels) -> dict:
    """``recovered`` ``(layers, heads)`` for each head patched alone from the clean run into the corrupted one,
    ``layer_recovered`` for each layer's whole attention output, and the two runs' mean metrics."""
    if clean_ids.shape != corrupted_ids.shape:
        raise ValueError(f"clean {clean_ids.shape} and corrupted {corrupted_ids.shape} token ids must align")
    labels = np.asarray(labels)
    clean_lp, clean = forward(model, clean_ids)
    corrupted_lp, _ = forward(model, corrupted_ids)
    scores = corrupted_lp.copy()
    scores[np.arange(len(labels)), labels] = -np.inf
    others = scores.argmax(axis=1)  # the corrupted run's best class other than the clean one
    clean_m = logit_difference(clean_lp, labels, others).mean()
    corrupted_m = logit_difference(corrupted_lp, labels, others).mean()
    gap = clean_m - corrupted_m

    def recovered(layer, heads):
        patched_lp, _ = forward(model, corrupted_ids, clean_into(clean, layer, heads))
        return float((logit_difference(patched_lp, labels, others).mean() - corrupted_m) / gap)

    blocks = encoder_blocks(model)
    heads = [block.num_heads for block in blocks]
    table = np.full((len(blocks), max(heads)), np.nan)
    for layer, count in enumerate(heads):
        for head in range(count):
            table[layer, head] = recovered(layer, [head])
    return {
        "recovered": table,
        "layer_recovered": np.array([recovered(layer, None) for layer in range(len(blocks))]),
        "clean_metric": float(clean_m),
        "corrupted_metric": float(corrupted_m),
    }


def top_attended_corruption(model, token_ids: np.ndarray) -> np.ndarray:
    """The default corruption for data without a known rule: in each text, the token that receives the most
    attention (all layers, heads and real query rows of the forward pass) replaced by the out-of-vocabulary id
    1 wherever it occurs."""
    real = token_ids != 0
    received = sum(s.sum(axis=(1, 2)) for s in attention_scores(model, token_ids))  # (batch, T or 1 + T)
    received = np.where(real, received[:, -real.shape[1] :], -np.inf)  # a [CLS] column first is not a word
    top = token_ids[np.arange(len(token_ids)), received.argmax(axis=1)]
    return np.where(token_ids == top[:, None], 1, token_ids).astype(token_ids.dtype)


def pairs_of(run, count: int):
    """(clean ids, corrupted ids, clean labels, how they were made) for ``run``: its task's own pairs when its
    data knows the rule (``patching_pairs``), else its first validation texts with the most-attended token
    replaced."""
    make_pairs = getattr(run.source, "patching_pairs", None)
    if make_pairs is not None:
        clean, corrupted, labels, how = make_pairs(count, int(run.cfg.seed))
        ids = run.token_ids(clean + corrupted)
        return ids[:count], ids[count:], labels, how
    splits = run.splits()
    clean = run.token_ids(splits.val_texts[:count])
    how = "validation texts; corrupted: the most-attended token replaced by the out-of-vocabulary id"
    return clean, top_attended_corruption(run.model, clean), np.asarray(splits.val_labels[:count]), how


def patching_figure(result: dict, title: str):
    table = np.column_stack([result["recovered"], result["layer_recovered"]])
    layers, columns = table.shape
    fig, ax = plt.subplots(figsize=(2.5 + 0.9 * columns, 1.6 + 0.6 * layers))
    im = ax.imshow(table, cmap="RdBu_r", vmin=-1, vmax=1, aspect="auto")
    for l in range(layers):
        for h in range(columns):
            if not np.isnan(table[l, h]):
                ax.text(h, l, f"{table[l, h]:.2f}", ha="center", va="center", fontsize=7,
                        color=label_color(im, abs(table[l, h])))  # fmt: skip
    ax.set_xticks(range(columns), [f"head {h}" for h in range(columns - 1)] + ["whole layer"], fontsize=7)
    ax.set_yticks(range(layers), [f"layer {l}" for l in range(layers)], fontsize=7)
    ax.set_title(title, fontsize=8)
    fig.colorbar(im, ax=ax, fraction=0.04)
    fig.tight_layout()
    return fig


def three_answers(run, recovered: np.ndarray, texts: int = 300) -> str:
    """One row per head: what head_patterns.py sees (its label; on data with a rule, the attention mass from the
    rule's query to its key as a multiple of chance), what head_importance.py's ablation costs, and what
    patching restores, on the run's first ``texts`` validation texts."""
    splits = run.splits()
    val = splits.val_texts[:texts], splits.val_labels[:texts]
    labels = {(r["layer"], r["head"]): r["label"] for r in model_head_patterns(run.model, run.preprocessor, val[0])}
    drop = head_importance(run.model, run.batches(*val))["drop_without_head"]
    rule = getattr(run.source, "relation_links", None)
    relations = relation_heads(run.model, run.preprocessor, val[0], rule()) if rule else []
    lines = [
        "| layer | head | attention pattern | rule's attention (× chance) | ablation: accuracy drop | patching |",
        "|---|---|---|---|---|---|",
    ]
    for (layer, head), value in np.ndenumerate(recovered):
        if np.isnan(value):
            continue
        lifts = [(np.asarray(r["mass"])[layer, head] / r["chance"], r["relation"]) for r in relations]
        lift, relation = max(lifts) if lifts else (None, None)
        read = "" if lift is None else f"{lift:.1f} ({relation})"
        label = labels[(layer, head)]
        lines.append(f"| {layer} | {head} | {label} | {read} | {drop[layer, head]:+.4f} | {value:.3f} |")
    return "\n".join(lines) + "\n"


def run_head_patching(run_dir, pairs: int = 200, out=None) -> dict:
    """Patch every head of a finished run on ``pairs`` clean/corrupted pairs; write ``patching.json``,
    ``patching.png`` and ``patching.md`` (:func:`three_answers`) into ``out`` (default RUN_DIR/head_patching/),
    the picture and the scalars into the run's TensorBoard."""
    check_out_folder(out, "patching.json, patching.png, patching.md")
    if pairs < 1:
        raise UserError(f"--pairs={pairs} is invalid: must be an integer >= 1")
    run = load_run(run_dir, needs_attention=True)
    if isinstance(run.model.input, dict) or len(run.model.inputs) != 1:
        raise UserError(
            f"{run.path}'s model reads more than token ids (a bag of n-grams beside the encoder): patching reads "
            "an encoder alone"
        )
    clean, corrupted, labels, how = pairs_of(run, pairs)
    result = head_patching(run.model, clean, corrupted, labels)
    table = result["recovered"]
    top = [int(i) for i in np.unravel_index(np.nanargmax(table), table.shape)]
    record = {
        "recovered": [[None if np.isnan(v) else float(v) for v in row] for row in table],
        "layer_recovered": result["layer_recovered"].tolist(),
        "top": top,
        "pairs": len(labels),
        "pairs_made": how,
        "metric": METRIC,
        "clean_metric": result["clean_metric"],
        "corrupted_metric": result["corrupted_metric"],
    }
    out_dir = run.path / "head_patching" if out is None else Path(out)
    title = f"activation patching, {len(labels)} pairs: share of the clean run's answer restored"
    png = figure_to_png(patching_figure(result, title))
    write_bytes_atomic(out_dir / "patching.png", png)
    write_json_atomic(out_dir / "patching.json", record)
    answers = three_answers(run, table)
    write_text_atomic(out_dir / "patching.md", f"# {title} ({how})\n\n{answers}")
    writer = tf.summary.create_file_writer(str(run.path / "tensorboard" / ANALYSIS_TB))
    with writer.as_default(step=0):
        tf.summary.image("head_patching", tf.io.decode_png(png, channels=3)[None])
        for (layer, head), value in np.ndenumerate(table):
            if not np.isnan(value):
                tf.summary.scalar(f"head_patching/recovered/layer_{layer}/head_{head}", value)
    writer.close()
    return {**record, "table": answers, "out_dir": str(out_dir)}
