"""The vocabulary: ``TextVectorization`` adapted on the training texts only, saved beside the run."""

from __future__ import annotations

import os
from pathlib import Path

import keras
import numpy as np
import tensorflow as tf

from mha_project.atomic import write_text_atomic
from mha_project.data.texts import select_texts, text_dataset
from mha_project.errors import ConfigError


def make_vectorizer(
    train_texts, vocab_size: int, vocabulary=None, sample: int | None = None, seed: int = 0, source: str = "the data"
):
    """TextVectorization adapted on the training texts only (or given a saved vocabulary).

    ``sample`` (``data.vocab_sample``): adapt on a seeded random ``sample`` of the texts when there are
    more, so the time and memory of building the vocabulary stop growing with the dataset (word
    frequencies settle long before: the 10k most frequent words of 50k reviews are those of 500k).
    Read its ids with :func:`ragged_ids`: every text keeps its own length; padding happens per batch in the
    pipeline. ``source`` names the texts in the error raised when they hold no word at all.
    """
    vectorizer = keras.layers.TextVectorization(
        # Keras allows ragged output on the TensorFlow backend only; elsewhere ragged_ids strips the padding.
        max_tokens=vocab_size,
        output_mode="int",
        ragged=keras.backend.backend() == "tensorflow",
        vocabulary=vocabulary,
    )
    if vocabulary is None:
        texts = train_texts
        if sample is not None and len(texts) > sample:
            chosen = np.sort(np.random.default_rng(seed).choice(len(texts), size=sample, replace=False))
            texts = select_texts(texts, chosen)
        vectorizer.adapt(text_dataset(texts).batch(1024))
        if vectorizer.vocabulary_size() <= 2:  # only padding and [UNK]: nothing to learn from
            raise ConfigError(
                f"the {len(texts)} training texts of {source} have no words (every one is empty or "
                "punctuation only): check the dataset's files"
            )
    return vectorizer


def with_reserved_words(words: list[str], vocab_size: int, reserved: list[str]) -> list[str]:
    """The adapted words (no padding / ``[UNK]``) with ``reserved`` as the last ids, in place of the least
    frequent words, so the embedding table keeps its size.

    >>> with_reserved_words(["the", "a", "of"], vocab_size=5, reserved=["[MASK]"])
    ['the', 'a', '[MASK]']
    """
    words = [w for w in words if w not in reserved]
    return words[: vocab_size - 2 - len(reserved)] + list(reserved)


def saved_vectorizer(path: os.PathLike, vocab_size: int):
    """The vectorizer of a saved ``vocab.txt``: the same ids as the run that wrote it."""
    return make_vectorizer(None, int(vocab_size), vocabulary=read_vocabulary(path))


def ragged_ids(vectorizer, texts) -> tf.RaggedTensor:
    """The token ids of a batch of ``texts`` (strings, or a string tensor inside tf.data), one row per text,
    as a ``tf.RaggedTensor`` on every Keras backend."""
    ids = vectorizer(texts)
    if isinstance(ids, tf.RaggedTensor):
        return ids
    # Dense (not the TensorFlow backend): padded with 0 to the longest text, and 0 is never a word's id.
    return tf.RaggedTensor.from_tensor(
        tf.convert_to_tensor(np.asarray(ids) if not tf.is_tensor(ids) else ids), padding=0
    )


def save_vocabulary(vectorizer, path: os.PathLike) -> None:
    write_text_atomic(path, "\n".join(vectorizer.get_vocabulary()) + "\n")


def read_vocabulary(path: os.PathLike) -> list[str]:
    tokens = Path(path).read_text(encoding="utf-8").split("\n")[:-1]
    return tokens[2:]  # drop the padding ("") and out-of-vocabulary ("[UNK]") entries Keras re-adds
