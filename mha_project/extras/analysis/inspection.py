"""Inspect one sentence with a trained run: prediction, most-attended tokens, a layers x heads picture."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import tensorflow as tf

from mha_project.attention.plots import FIGURE_FORMATS, SCALES, attention_grid, save_figure_as
from mha_project.attention.scores import normalized_entropy, scores_for_texts
from mha_project.attention.summaries import write_attention_summaries
from mha_project.data.vocabulary import ragged_ids
from mha_project.errors import UserError
from mha_project.extras.analysis.runs import as_run
from mha_project.run_dir import ANALYSIS_TB


def inspect_text(
    run_dir,
    text: str,
    out: str | None = None,
    top_k: int = 3,
    max_tokens: int = 24,
    scale: str = "shared",
    draw=None,
) -> dict:
    """One sentence through a run (a run directory or a loaded ``Run``): the prediction, each head's most
    attended tokens, a picture (the layers x heads grid of weights, or ``draw(scores_per_layer, tokens,
    caption) -> figure``; PNG, SVG or PDF by ``out``'s extension) and the same images in TensorBoard."""
    if scale not in SCALES:
        raise UserError(f"--scale={scale} is invalid: must be one of {', '.join(SCALES)}")
    if max_tokens < 1:
        raise UserError(f"--max-tokens={max_tokens} is invalid: must be an integer >= 1")
    if top_k < 1:
        raise UserError(f"--top={top_k} is invalid: must be an integer >= 1")
    if not text or not text.strip():
        raise UserError('text is empty: give the sentence to inspect, e.g. "a lovely, fresh coffee"')
    run = as_run(run_dir, needs_attention=True)
    out_path = Path(out) if out else run.path / "inspect" / f"attention_{_slug(text)}.png"
    if out and out_path.is_dir():  # --out DIR: the default file name inside it
        out_path = out_path / f"attention_{_slug(text)}.png"
    if out_path.suffix.lower().lstrip(".") not in FIGURE_FORMATS:
        raise UserError(f"--out={out_path} is invalid: the extension must be one of .png, .svg, .pdf")

    notice = _truncation_notice(run, text)
    if len(run.preprocessor.encode([text])[0]) == 0:
        raise UserError(f"text {text!r} has no tokens after standardisation (only punctuation or spaces)")

    scores, tokens, real = scores_for_texts(run.model, run.preprocessor, [text])
    tokens = tokens[0]
    probs = run.model.predict(run.model_inputs([text]), verbose=0)[0]
    predicted = int(np.argmax(probs))

    top = _most_attended(scores, tokens, real, top_k)

    caption = f"{text[:80]} → {run.class_names[predicted]} ({probs[predicted]:.2f})"
    layers = [s[0] for s in scores]
    fig = draw(layers, tokens, caption) if draw else attention_grid(layers, tokens, caption, max_tokens, scale=scale)
    try:
        save_figure_as(fig, out_path)
    except OSError as err:  # a read-only run dir, a file where the folder should be, a full disk
        raise UserError(f"cannot write {out_path} ({err.strerror or err}); pass --out with a writable path") from None

    writer = tf.summary.create_file_writer(str(run.path / "tensorboard" / ANALYSIS_TB))
    write_attention_summaries(
        writer,
        run.model,
        run.preprocessor,
        [text],
        step=0,
        class_names=run.class_names,
        max_tokens=max_tokens,
        prefix="inspect/",
    )
    writer.close()
    return {
        "text": text,
        "predicted": run.class_names[predicted],
        "probability": float(probs[predicted]),
        "probabilities": {c: float(p) for c, p in zip(run.class_names, probs)},
        "tokens": tokens,
        "uniform": 1.0 / len(tokens),  # the weight every token gets from a head that attends evenly
        "top": top,
        "png": str(out_path),
        "notice": notice,
    }


def _truncation_notice(run, text: str) -> str | None:
    words = run.preprocessor
    full_length = int(ragged_ids(words.vectorizer, np.asarray([text], dtype=object)).row_lengths()[0])
    if full_length <= words.seq_len:
        return None
    kept = {"head": "first", "tail": "last", "head_tail": "first quarter and last three quarters of the"}
    return (
        f"notice: the text has {full_length} tokens; only the {kept[words.truncation]} {words.seq_len} are used "
        f"(data.seq_len, data.truncation={words.truncation})"
    )


def _most_attended(scores, tokens, real, top_k: int) -> list[dict]:
    """Per layer and head: the tokens that receive the most attention, with their positions."""
    top = []
    for l, layer_scores in enumerate(scores):
        entropies = normalized_entropy(layer_scores, real)
        for h in range(layer_scores.shape[1]):
            # With [CLS], its row is what the classifier reads; otherwise average over all queries.
            received = layer_scores[0, h, 0] if tokens[0] == "[CLS]" else layer_scores[0, h].mean(axis=0)
            order = np.argsort(-received[: len(tokens)])[:top_k]
            top.append(
                {
                    "layer": l,
                    "head": h,
                    "normalized_entropy": float(entropies[h]),
                    "tokens": [(int(i), tokens[i], float(received[i])) for i in order],
                }
            )
    return top


def _slug(text: str) -> str:
    """A file-name-safe stem; a short hash keeps texts with the same readable part (emoji only, say) apart."""
    keep = "".join(ch if ch.isalnum() else "_" for ch in text.strip()[:40]).strip("_") or "text"
    return f"{keep}_{hashlib.sha1(text.encode()).hexdigest()[:6]}"
