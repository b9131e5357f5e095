"""The wide part of a wide-and-deep classifier: a bag of a text's unigrams and bigrams, read from the same
token ids as the encoder (``model.ngram_branch``), either embedded and averaged (:class:`BagOfNgrams`,
fastText) or as naive-Bayes-weighted binary features of a linear model (:class:`NaiveBayesNgrams`, NBSVM)."""

from __future__ import annotations

import keras
import numpy as np
from keras import layers, ops

from mha_project.model import PACKAGE

# The largest vocabulary whose bigrams a * vocab + b still fit in int32 (JAX's default integer width).
_EXACT_PAIRS = 46340


def ngram_rows(token_ids, vocab_size: int, buckets: int):
    """Each text's unigram ids, then the row of each bigram (``ids[:, t]``, ``ids[:, t + 1]``) hashed into
    ``buckets`` rows after the unigram rows; and which of them are real (padding, id 0, is no n-gram; a
    bigram is two real tokens side by side). Shapes ``(batch, 2 * length - 1)``."""
    ids = ops.cast(token_ids, "int32")
    real = ops.not_equal(ids, 0)
    first, second = ids[:, :-1], ids[:, 1:]
    if vocab_size > _EXACT_PAIRS:  # fold the ids first so that the pair index stays in int32
        first, second = first % _EXACT_PAIRS, second % _EXACT_PAIRS
    pair = first * min(vocab_size, _EXACT_PAIRS) + second
    rows = ops.concatenate([ids, vocab_size + pair % buckets], axis=1)
    return rows, ops.concatenate([real, ops.logical_and(real[:, :-1], real[:, 1:])], axis=1)


@keras.saving.register_keras_serializable(package=PACKAGE)
class BagOfNgrams(layers.Layer):
    """Class logits from the mean embedding of a text's unigrams and bigrams: fastText's model (Joulin et al.
    2016; Keras's ``imdb_fasttext`` example), with bigrams hashed into ``buckets`` rows instead of indexed
    from a list made before training, so it reads token ids alone and any text has all its bigrams.

    Padding (id 0) is no n-gram; a bigram is two real tokens side by side. A text without tokens gets the
    output layer's bias.

    Args:
        vocab_size: the token ids' range (the unigram rows).
        num_classes: the logits' width.
        buckets: hashed bigram rows, after the unigram rows.
        dim: the n-gram embedding's width (fastText's example: 50).

    Example:
    >>> bag = BagOfNgrams(vocab_size=10, num_classes=2, buckets=16, dim=4)
    >>> tuple(bag(ops.convert_to_tensor([[3, 4, 5, 0], [6, 0, 0, 0]], "int32")).shape)
    (2, 2)
    """

    def __init__(self, vocab_size: int, num_classes: int, buckets: int = 2**18, dim: int = 16, **kwargs):
        super().__init__(**kwargs)
        self.vocab_size = vocab_size
        self.num_classes = num_classes
        self.buckets = buckets
        self.dim = dim
        self.embedding = layers.Embedding(vocab_size + buckets, dim, dtype=self.dtype_policy, name="ngram_embedding")
        # float32 logits: they are added to the encoder's before the softmax (as stable under mixed precision).
        self.output_dense = layers.Dense(num_classes, dtype="float32", name="ngram_logits")

    def build(self, input_shape):
        self.embedding.build(input_shape)
        self.output_dense.build((input_shape[0], self.dim))
        self.built = True

    def call(self, token_ids):
        rows, real = ngram_rows(token_ids, self.vocab_size, self.buckets)
        weights = ops.cast(real, self.compute_dtype)
        vectors = self.embedding(rows) * weights[:, :, None]
        count = ops.maximum(ops.sum(weights, axis=1, keepdims=True), ops.cast(1.0, self.compute_dtype))
        return self.output_dense(ops.sum(vectors, axis=1) / count)

    def compute_output_shape(self, input_shape):
        return (input_shape[0], self.num_classes)

    def compute_output_spec(self, token_ids):
        return keras.KerasTensor(self.compute_output_shape(token_ids.shape), dtype="float32")  # as call returns

    def get_config(self):
        return {
            **super().get_config(),
            "vocab_size": self.vocab_size,
            "num_classes": self.num_classes,
            "buckets": self.buckets,
            "dim": self.dim,
        }


@keras.saving.register_keras_serializable(package=PACKAGE)
class NaiveBayesNgrams(layers.Layer):
    """Class logits of a linear model on a text's distinct unigrams and hashed bigrams, each binary feature
    scaled by its naive-Bayes log-count ratio: NBSVM (Wang & Manning 2012), with logistic regression's loss.

    For class c, ``r[f, c] = log((p[f] / |p|) / (q[f] / |q|))``, where ``p`` counts the training texts of
    class c holding feature f and ``q`` those of the other classes (one-vs-rest), both plus ``smoothing``;
    the logit is ``sum over the text's distinct features f of r[f, c] * w[f, c]``, plus a bias. ``adapt``
    computes ``r`` once from labelled token ids (as ``TextVectorization.adapt`` builds its vocabulary): it is
    a non-trainable weight, saved and loaded with the model; ``w`` and the bias train from zero, with an L2
    penalty ``l2 * sum(w^2)`` on ``w`` (logistic regression on the scaled features, as NBSVM-LR).

    Args:
        vocab_size: the token ids' range (the unigram features).
        num_classes: the logits' width.
        buckets: hashed bigram features, after the unigram features.
        l2: the penalty's weight (per training example: it is added to the mean loss of a batch).
        smoothing: the count added to every feature's (NBSVM's alpha).

    Example:
    >>> nb = NaiveBayesNgrams(vocab_size=10, num_classes=2, buckets=16)
    >>> ids = np.array([[3, 4, 0], [5, 0, 0]], "int32")
    >>> nb.adapt([(ids, np.array([1, 0]))])
    >>> tuple(nb(ids).shape)
    (2, 2)
    """

    def __init__(
        self, vocab_size: int, num_classes: int, buckets: int = 2**18, l2: float = 0.0, smoothing: float = 1.0, **kwargs
    ):
        super().__init__(**kwargs)
        self.vocab_size = vocab_size
        self.num_classes = num_classes
        self.buckets = buckets
        self.l2 = l2
        self.smoothing = smoothing
        self.features = vocab_size + buckets

    def build(self, input_shape):
        shape = (self.features, self.num_classes)
        self.ratios = self.add_weight(shape=shape, initializer="zeros", trainable=False, name="log_count_ratios")
        self.kernel = self.add_weight(
            shape=shape,
            initializer="zeros",
            regularizer=keras.regularizers.L2(self.l2) if self.l2 else None,
            name="kernel",
        )
        self.bias = self.add_weight(shape=(self.num_classes,), initializer="zeros", name="bias")
        self.built = True

    def distinct_features(self, token_ids):
        """Each text's features, sorted, and which are present: real and the first of their value (binarized
        counts, as NBSVM's). Shapes ``(batch, 2 * length - 1)``."""
        rows, real = ngram_rows(token_ids, self.vocab_size, self.buckets)
        rows = ops.sort(ops.where(real, rows, -1), axis=1)  # padding sorts first, equal features side by side
        first = ops.concatenate([ops.ones_like(rows[:, :1], "bool"), ops.not_equal(rows[:, 1:], rows[:, :-1])], axis=1)
        return ops.maximum(rows, 0), ops.logical_and(first, ops.greater_equal(rows, 0))

    def adapt(self, batches) -> None:
        """The log-count ratios from ``(token_ids, labels)`` batches: the training split's, never validation's."""
        if not self.built:
            self.build((None, None))
        counts = np.zeros((self.features, self.num_classes), "float64")  # texts of each class holding each feature
        for token_ids, labels in batches:
            rows, present = (keras.ops.convert_to_numpy(x) for x in self.distinct_features(token_ids))
            classes = np.broadcast_to(np.asarray(labels).reshape(-1, 1), rows.shape)
            np.add.at(counts, (rows[present], classes[present]), 1.0)
        p = counts + self.smoothing
        q = counts.sum(axis=1, keepdims=True) - counts + self.smoothing
        self.ratios.assign(np.log(p / p.sum(axis=0)) - np.log(q / q.sum(axis=0)))

    def call(self, token_ids):
        rows, present = self.distinct_features(token_ids)
        weights = ops.take(self.ratios * self.kernel, rows, axis=0) * ops.cast(present, self.ratios.dtype)[:, :, None]
        return ops.cast(ops.sum(weights, axis=1) + self.bias, "float32")

    def compute_output_shape(self, input_shape):
        return (input_shape[0], self.num_classes)

    def compute_output_spec(self, token_ids):
        return keras.KerasTensor(self.compute_output_shape(token_ids.shape), dtype="float32")

    def get_config(self):
        return {
            **super().get_config(),
            "vocab_size": self.vocab_size,
            "num_classes": self.num_classes,
            "buckets": self.buckets,
            "l2": self.l2,
            "smoothing": self.smoothing,
        }
