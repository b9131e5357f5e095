"""TensorBoard records of a model's attention on a few texts: images, histograms, entropies, predictions.

Written by the training callback every epoch and by ``inspect_attention.py`` for any sentence.
"""

from __future__ import annotations

import json

import numpy as np
import tensorflow as tf
from tensorboard.compat.proto import summary_pb2

from mha_project.attention import ATTENTION_PLUGIN, CAPTION, WEIGHTS, quantize
from mha_project.attention.plots import attention_grid, figure_to_png
from mha_project.attention.scores import attention_entropy, normalized_entropy, scores_for_texts


def write_attention_summaries(
    writer,
    model,
    preprocessor,
    texts,
    step: int,
    *,
    labels=None,
    class_names=None,
    max_tokens: int = 24,
    prefix: str = "",
    classify: bool = True,
    run_label: str | None = None,
) -> list:
    """Write image, histogram, entropy and text records for ``texts`` at ``step``; return the scores.

    ``classify=False`` (a masked language model): attention only, no predicted class per probe.
    ``run_label`` (not None): also each probe's weights for TensorBoard's ``attention`` plugin, the run listed
    under that label (``mha_project/attention/__init__.py``).
    """
    scores, tokens, real = scores_for_texts(model, preprocessor, texts)
    probs = model.predict(preprocessor.model_inputs(model, texts), verbose=0) if classify else None
    with writer.as_default(step=step):
        for l, layer_scores in enumerate(scores):
            images = []
            for k, text in enumerate(texts):
                # The image title keeps a line of the text; the Text tab (attention_probe/k) has all of it.
                caption = text if len(text) <= 90 else text[:89] + "… (full text: attention_probe/" + f"{k})"
                fig = attention_grid([layer_scores[k]], tokens[k], f"layer {l}, probe {k}: {caption}", max_tokens)
                images.append(tf.io.decode_png(figure_to_png(fig), channels=3))
            # One image per probe text, one panel per head.
            tf.summary.image(f"{prefix}attention/layer_{l}", _stack(images), max_outputs=len(images))
            real_scores = layer_scores[
                np.broadcast_to(real[:, None, :, None] & real[:, None, None, :], layer_scores.shape)
            ]
            tf.summary.histogram(f"{prefix}attention_scores/layer_{l}", real_scores)
            for h, entropy in enumerate(attention_entropy(layer_scores, real)):
                tf.summary.scalar(f"{prefix}attention_entropy/layer_{l}/head_{h}", float(entropy))
            # entropy / log(n): 1.0 = uniform whatever the text length, so runs and datasets compare.
            for h, entropy in enumerate(normalized_entropy(layer_scores, real)):
                tf.summary.scalar(f"{prefix}attention_normalized_entropy/layer_{l}/head_{h}", float(entropy))
        for k, text in enumerate(texts if classify else []):
            predicted = int(np.argmax(probs[k]))
            truth = f"**true:** {class_name(int(labels[k]), class_names)}  \n" if labels is not None else ""
            tf.summary.text(
                f"{prefix}attention_probe/{k}",
                f"**text:** {text}  \n{truth}**predicted:** {class_name(predicted, class_names)} "
                f"(p={probs[k][predicted]:.3f})",
            )
        for k, text in enumerate(texts if run_label is not None else []):
            label = None if labels is None else labels[k]
            caption = prediction_caption(probs[k], class_names, label) if classify else ""
            write_attention_weights(k, text, tokens[k], [s[k] for s in scores], caption, run_label, step)
    writer.flush()
    return scores


def write_attention_weights(k: int, text: str, tokens: list[str], layers: list, caption: str, label: str, step):
    """Probe ``k``'s attention at ``step`` (one ``(heads, n, n)`` array per layer) into the default writer, for
    TensorBoard's ``attention`` plugin; ``label``: how the run is listed (its swept values, e.g. ``heads=8``)."""
    n = len(tokens)
    weights = np.stack([quantize(np.asarray(s)[:, :n, :n]) for s in layers])
    described = {"text": text, "tokens": list(tokens), "label": label}
    at = int(step)
    tag = f"attention_weights/probe_{k}"
    tf.summary.write(f"{tag}/{WEIGHTS}/{at}", tf.constant(weights), step=at, metadata=plugin_metadata(described))
    tf.summary.write(f"{tag}/{CAPTION}/{at}", tf.constant(caption), step=at, metadata=plugin_metadata({}))


def plugin_metadata(content: dict):
    metadata = tf.compat.v1.SummaryMetadata()
    metadata.plugin_data.plugin_name = ATTENTION_PLUGIN
    metadata.plugin_data.content = json.dumps(content, ensure_ascii=False).encode("utf-8")
    metadata.data_class = summary_pb2.DATA_CLASS_TENSOR  # what the data provider's list_tensors returns
    return metadata


def prediction_caption(probs, class_names=None, label=None) -> str:
    """``predicted great (p=0.91) · true label other``: a text's caption in the head view and its tab."""
    predicted = int(np.argmax(probs))
    caption = f"predicted {class_name(predicted, class_names)} (p={probs[predicted]:.2f})"
    return caption if label is None else caption + f" · true label {class_name(int(label), class_names)}"


def class_name(index: int, class_names) -> str:
    return class_names[index] if class_names else str(index)


def _stack(images):
    height = max(int(i.shape[0]) for i in images)
    width = max(int(i.shape[1]) for i in images)
    return tf.stack([tf.image.pad_to_bounding_box(i, 0, 0, height, width) for i in images])
