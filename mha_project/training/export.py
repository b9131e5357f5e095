"""The SavedModel a run exports: raw strings in; class probabilities and names out, named as TF Serving's
classification signature names them (``scores``, ``classes``) plus the predicted class."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import keras
import tensorflow as tf

from mha_project.data.pipeline import truncate_token_ids


def export_inference_model(
    model, vectorizer, seq_len: int, path: Path, truncation: str = "head", class_names=None
) -> None:
    """SavedModel whose ``serve`` takes raw strings ``text`` (shape (batch,)) and returns ``scores`` (batch,
    classes) probabilities, ``classes`` (batch, classes) the class names in that order, and
    ``predicted_class`` (batch,) the most probable name; it tokenises and truncates (``data.truncation``)
    exactly as training did."""
    names = tf.constant([str(c) for c in class_names or range(model.output_shape[-1])])
    text_to_ids = keras.layers.TextVectorization(
        output_mode="int",
        ragged=True,
        vocabulary=vectorizer.get_vocabulary(include_special_tokens=False),
        name="text_to_ids",
    )
    text_to_ids.build((None,))

    # An endpoint of our own rather than model.export: truncation other than the head's is not a Keras layer.
    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="text")])
    def serve(text):
        ids = truncate_token_ids(text_to_ids(text), seq_len, truncation)
        scores = model(tf.cast(ids, tf.int32).to_tensor(shape=[None, seq_len]), training=False)
        classes = tf.broadcast_to(names, tf.shape(scores))
        return {"scores": scores, "classes": classes, "predicted_class": tf.gather(names, tf.argmax(scores, -1))}

    end_to_end = keras.export.ExportArchive()
    end_to_end.track(model)
    end_to_end.track(text_to_ids)
    end_to_end.add_endpoint("serve", serve)

    tmp = path.with_name(f".tmp-{path.name}")
    shutil.rmtree(tmp, ignore_errors=True)
    tf_log = logging.getLogger("tensorflow")
    level = tf_log.level
    tf_log.setLevel(logging.WARNING)  # "Assets written to ..." on every export is not news
    try:
        end_to_end.write_out(str(tmp), verbose=False)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)  # a half-written export only takes space (a full disk's)
        raise
    finally:
        tf_log.setLevel(level)
    shutil.rmtree(path, ignore_errors=True)  # a complete export replaces an older one
    tmp.rename(path)
