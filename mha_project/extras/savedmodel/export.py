"""The SavedModel a run exports: raw strings in; class probabilities and names out, named as TF Serving's
classification signature names them (``scores``, ``classes``) plus the predicted class."""

from __future__ import annotations

import dataclasses
import logging
import tempfile
from pathlib import Path

import keras
import tensorflow as tf

from mha_project.atomic import replaced_atomically
from mha_project.data.pipeline import truncate_token_ids, with_text_inputs
from mha_project.quiet import loggers_at


def export_inference_model(model, preprocessor, path: Path, class_names=None) -> None:
    """SavedModel whose ``serve`` takes raw strings ``text`` (shape (batch,)) and returns ``scores`` (batch,
    classes) probabilities, ``classes`` (batch, classes) the class names in that order, and
    ``predicted_class`` (batch,) the most probable name; it tokenises and truncates exactly as training did
    (``preprocessor``: the run's vocabulary, seq_len and truncation)."""
    names = [str(c) for c in class_names or range(model.output_shape[-1])]
    if keras.backend.backend() != "tensorflow":
        _export_through_saved_ids_model(model, preprocessor, path, names)
        return
    names = tf.constant(names)
    text_to_ids = keras.layers.TextVectorization(
        output_mode="int",
        ragged=True,
        vocabulary=preprocessor.vectorizer.get_vocabulary(include_special_tokens=False),
        name="text_to_ids",
    )
    text_to_ids.build((None,))
    served = dataclasses.replace(preprocessor, vectorizer=text_to_ids)  # the run's ids, from the tracked vocabulary

    # An endpoint of our own rather than model.export: truncation other than the head's is not a Keras layer.
    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="text")])
    def serve(text):
        ids = tf.cast(served.ids_in_graph(text), tf.int32).to_tensor(shape=[None, served.seq_len])
        scores = model(with_text_inputs(model, ids, text), training=False)
        classes = tf.broadcast_to(names, tf.shape(scores))
        return {"scores": scores, "classes": classes, "predicted_class": tf.gather(names, tf.argmax(scores, -1))}

    end_to_end = keras.export.ExportArchive()
    end_to_end.track(model)
    end_to_end.track(text_to_ids)
    end_to_end.add_endpoint("serve", serve)

    _write_atomically(path, lambda tmp: end_to_end.write_out(str(tmp), verbose=False))


def _write_atomically(path: Path, write) -> None:
    tf_log = logging.getLogger("tensorflow")
    level = tf_log.level
    tf_log.setLevel(logging.WARNING)  # "Assets written to ..." on every export is not news
    try:
        with replaced_atomically(path) as tmp:
            write(tmp)
    finally:
        tf_log.setLevel(level)


# TextVectorization's "lower_and_strip_punctuation", as keras/src/layers/preprocessing/text_vectorization.py
# writes it (tests/test_train.py checks the export against the model on the same texts).
PUNCTUATION = r'[!"#$%&()\*\+,-\./:;<=>?@\[\\\]^_`{|}~\']'


class _RawTextServer(tf.Module):
    """Raw strings -> the saved ids model, in TensorFlow, for a model trained on another Keras backend."""

    def __init__(self, ids_model, vocabulary, seq_len, truncation, names, text_inputs=None):
        super().__init__()
        self.ids_model = ids_model
        self.text_inputs = text_inputs
        words = tf.constant(vocabulary)
        ids = tf.range(2, len(vocabulary) + 2, dtype=tf.int64)  # 0 is padding, 1 out-of-vocabulary
        self.table = tf.lookup.StaticHashTable(tf.lookup.KeyValueTensorInitializer(words, ids), default_value=1)
        self.names = tf.constant(names)
        self.seq_len, self.truncation = seq_len, truncation

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="text")])
    def serve(self, text):
        words = tf.strings.split(tf.strings.regex_replace(tf.strings.lower(text), PUNCTUATION, ""))
        ids = truncate_token_ids(tf.ragged.map_flat_values(self.table.lookup, words), self.seq_len, self.truncation)
        ids = tf.cast(ids, tf.int32).to_tensor(shape=[None, self.seq_len])
        scores = self.ids_model.serve(ids if self.text_inputs is None else {"token_ids": ids, **self.text_inputs(text)})
        classes = tf.broadcast_to(self.names, tf.shape(scores))
        return {"scores": scores, "classes": classes, "predicted_class": tf.gather(self.names, tf.argmax(scores, -1))}


def _export_through_saved_ids_model(model, preprocessor, path, names) -> None:
    """Another backend's model: Keras exports it (token ids in; jax2tf for JAX), TensorFlow adds the
    tokeniser in front. ExportArchive cannot take the tokenising function here: on JAX it must be JAX code."""
    with tempfile.TemporaryDirectory() as scratch:
        model.export(scratch, format="tf_saved_model", verbose=False)
        vocabulary = preprocessor.vectorizer.get_vocabulary(include_special_tokens=False)
        # Loading the scratch copy warns that jax2tf's functions have custom gradients the copy does not
        # keep; the copy only serves, so the warning is about nothing a user has.
        with loggers_at(logging.ERROR, "tensorflow", "absl"):  # TensorFlow logs it through absl
            loaded = tf.saved_model.load(scratch)
        server = _RawTextServer(
            loaded,
            vocabulary,
            preprocessor.seq_len,
            preprocessor.truncation,
            names,
            getattr(model, "text_inputs", None),
        )
        options = tf.saved_model.SaveOptions(experimental_custom_gradients=False)  # serving needs no gradients
        _write_atomically(
            path, lambda tmp: tf.saved_model.save(server, str(tmp), signatures={"serve": server.serve}, options=options)
        )
