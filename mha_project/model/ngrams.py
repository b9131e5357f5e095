"""The wide part of a wide-and-deep classifier: a bag of a text's unigrams and bigrams, read from the same
token ids as the encoder (``model.ngram_branch``)."""

from __future__ import annotations

import keras
from keras import layers, ops

from mha_project.model import PACKAGE

# The largest vocabulary whose bigrams a * vocab + b still fit in int32 (JAX's default integer width).
_EXACT_PAIRS = 46340


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

    def bigram_ids(self, ids):
        """The embedding row of each bigram (``ids[:, t]``, ``ids[:, t + 1]``): after the unigram rows."""
        first, second = ids[:, :-1], ids[:, 1:]
        if self.vocab_size > _EXACT_PAIRS:  # fold the ids first so that the pair index stays in int32
            first, second = first % _EXACT_PAIRS, second % _EXACT_PAIRS
        pair = first * min(self.vocab_size, _EXACT_PAIRS) + second
        return self.vocab_size + pair % self.buckets

    def call(self, token_ids):
        ids = ops.cast(token_ids, "int32")
        real = ops.not_equal(ids, 0)
        rows = ops.concatenate([ids, self.bigram_ids(ids)], axis=1)
        weights = ops.cast(
            ops.concatenate([real, ops.logical_and(real[:, :-1], real[:, 1:])], axis=1), self.compute_dtype
        )
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
