"""The wide part of a wide-and-deep classifier: a bag of every n-gram of the whole text (``model.ngram_*``),
whatever the encoder's ``seq_len``, truncation and vocabulary. :func:`ngram_inputs` turns raw strings into each
text's distinct n-grams and their counts (in tf.data, in the SavedModel, for a list of strings); three layers
read them: :class:`BagOfNgrams` (fastText's mean embedding of hashed n-grams), :class:`NaiveBayesNgrams`
(NBSVM) and :class:`TfidfNgrams` (TF-IDF and a linear layer), the last two on the training split's own
vocabulary of n-grams, as scikit-learn's ``CountVectorizer`` keeps it."""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf
from keras import layers, ops

from mha_project import PACKAGE

# Each n-gram's id: its hash in 1 .. NGRAM_IDS - 1 (0 is padding), int32 as JAX's default integers are. Among the
# few million distinct n-grams of a large training split, about one in a thousand shares its id with another.
NGRAM_IDS = 2**31 - 1
_ABSENT = NGRAM_IDS  # a key no n-gram has: it pads a vocabulary smaller than its table


def ngram_inputs(texts, max_n: int = 2) -> dict:
    """Each text's distinct n-grams (every word, then every run of 2 to ``max_n`` words; the words are
    :func:`bag_words`'), as ids (their hash; no vocabulary to adapt or save: any text has all its n-grams, read
    from the raw string), and how often each occurs: ``{"ngrams": int32 (batch, most distinct n-grams, 2)}``,
    ``[..., 0]`` the id and ``[..., 1]`` its count, padded with 0 (one tensor, so that the two always have the
    same length). The bags map the ids to their features.

    >>> out = ngram_inputs(tf.constant(["the cat saw the cat", ""]))
    >>> out["ngrams"][..., 1].numpy().tolist()
    [[2, 2, 1, 2, 1, 1], [0, 0, 0, 0, 0, 0]]
    """
    texts = tf.convert_to_tensor(texts, tf.string)
    grams = tf.strings.ngrams(bag_words(texts), ngram_width=tuple(range(1, max_n + 1)), separator=" ")
    ids = tf.strings.to_hash_bucket_fast(grams.flat_values, NGRAM_IDS - 1) + 1  # 0 stays padding
    # Distinct (text, n-gram) pairs in one flat pass; first occurrences keep the texts in order.
    pairs, _, counts = tf.unique_with_counts(grams.value_rowids() * NGRAM_IDS + ids)
    rows, nrows = pairs // NGRAM_IDS, tf.shape(texts, out_type=tf.int64)[0]
    ids_counts = tf.stack([tf.cast(pairs % NGRAM_IDS, tf.int32), counts], axis=1)
    return {"ngrams": tf.RaggedTensor.from_value_rowids(ids_counts, rows, nrows).to_tensor()}


def bag_words(texts) -> tf.RaggedTensor:
    """The words of a batch of texts as scikit-learn's ``CountVectorizer`` reads them (its default
    ``token_pattern``, ``(?u)\\b\\w\\w+\\b``, lowercased): runs of two or more letters, digits or underscores.
    Punctuation separates words (``tass.com``: ``tass``, ``com``) rather than joining them as the encoder's
    ``TextVectorization`` does (``tasscom``), and one-character words are dropped; the bag reads words as the
    linear models it is measured against do.

    >>> bag_words(tf.constant(["Don't stop: U.S. e-mail, a café!"])).to_list()
    [[b'don', b'stop', b'mail', b'caf\xc3\xa9']]
    """
    spaced = tf.strings.regex_replace(tf.strings.lower(texts, encoding="utf-8"), r"[^\pL\pN_]+", " ")
    words = tf.strings.split(spaced)
    return tf.ragged.boolean_mask(words, tf.strings.length(words, unit="UTF8_CHAR") >= 2)


class NgramLayer(layers.Layer):
    """What the three bags share: class logits (float32: they are added to the encoder's before the softmax)
    from ``ngrams`` as :func:`ngram_inputs` makes them (n-grams of 1 to ``max_n`` words), over ``features``
    features (a hashed bucket or a kept n-gram each)."""

    def __init__(self, num_classes: int, features: int = 2**20, max_n: int = 2, **kwargs):
        super().__init__(**kwargs)
        self.num_classes = num_classes
        self.features = features
        self.max_n = max_n

    def inputs_for(self, texts) -> dict:
        return ngram_inputs(texts, self.max_n)

    def compute_output_shape(self, input_shape):
        return (input_shape[0], self.num_classes)

    def compute_output_spec(self, ngrams):
        return keras.KerasTensor(self.compute_output_shape(ngrams.shape), dtype="float32")  # as call returns

    def features_and_counts(self, ngrams, dtype):
        return self.feature_of(ngrams[:, :, 0]), ops.cast(ngrams[:, :, 1], dtype)

    def get_config(self):
        return {**super().get_config(), "num_classes": self.num_classes, "features": self.features, "max_n": self.max_n}


@keras.saving.register_keras_serializable(package=PACKAGE)
class BagOfNgrams(NgramLayer):
    """Class logits from the mean embedding of a text's n-grams, each as often as it occurs: fastText's model
    (Joulin et al. 2016; Keras's ``imdb_fasttext`` example), the n-grams hashed into ``features`` rows (the
    hashing trick: nothing to adapt) instead of indexed from a list. A text without words gets the output
    layer's bias.

    >>> bag = BagOfNgrams(num_classes=2, features=16, dim=4)
    >>> tuple(bag(ngram_inputs(tf.constant(["great tea", "stale"]))["ngrams"]).shape)
    (2, 2)
    """

    def __init__(self, num_classes: int, features: int = 2**20, max_n: int = 2, dim: int = 16, **kwargs):
        super().__init__(num_classes, features, max_n, **kwargs)
        self.dim = dim
        self.embedding = layers.Embedding(features, dim, dtype=self.dtype_policy, name="ngram_embedding")
        self.output_dense = layers.Dense(num_classes, dtype="float32", name="ngram_logits")

    def build(self, input_shape):
        self.embedding.build(input_shape[:2])
        self.output_dense.build((input_shape[0], self.dim))
        self.built = True

    def feature_of(self, ids):
        return ids % self.features  # padding's count is 0: its row adds nothing

    def call(self, ngrams):
        rows, counts = self.features_and_counts(ngrams, self.compute_dtype)
        total = ops.maximum(ops.sum(counts, axis=1, keepdims=True), ops.cast(1.0, self.compute_dtype))
        return self.output_dense(ops.sum(self.embedding(rows) * counts[:, :, None], axis=1) / total)

    def get_config(self):
        return {**super().get_config(), "dim": self.dim}


class LinearNgramLayer(NgramLayer):
    """A linear model on a text's n-grams, each scaled by a weight ``adapt`` reads off the training split. Its
    features are the training split's own n-grams, as scikit-learn's ``CountVectorizer`` keeps them: feature
    ``i >= 1`` is the ``i``-th of the kept n-grams' ids (``keys``, ascending: the ``features - 1`` held by the most
    training texts, all of them when fewer), feature 0 every other n-gram, whose scale is 0 (scikit-learn ignores
    words it never saw). ``keys`` and the scale are non-trainable weights, saved and loaded with the model.
    ``kernel`` and ``bias`` train from zero, with scikit-learn's ``LogisticRegression`` penalty: ``c`` is its
    ``C``, the inverse strength. It minimises ``C * sum of the n losses + sum(kernel^2) / 2``; a batch's mean
    loss gets ``sum(kernel^2) / (2 C n)``, so one ``c`` means the same on 3,000 training texts as on 300,000
    (``n`` is counted by ``adapt`` and saved)."""

    scale_name = "scale"

    def __init__(self, num_classes: int, features: int = 2**20, max_n: int = 2, c: float = 1.0, **kwargs):
        super().__init__(num_classes, features, max_n, **kwargs)
        self.c = c

    def build(self, input_shape=None):
        self.keys = self.add_weight(
            shape=(self.features - 1,), dtype="int32", initializer=keras.initializers.Constant(_ABSENT),
            trainable=False, name="ngram_ids",
        )  # fmt: skip
        self.scale = self.add_weight(
            shape=self.scale_shape(), initializer="zeros", trainable=False, name=self.scale_name
        )
        self.training_texts = self.add_weight(shape=(), initializer="ones", trainable=False, name="training_texts")
        shape = (self.features, self.num_classes)
        self.kernel = self.add_weight(shape=shape, initializer="zeros", regularizer=self.penalty, name="kernel")
        self.bias = self.add_weight(shape=(self.num_classes,), initializer="zeros", name="bias")
        self.built = True

    def feature_of(self, ids):
        flat = ops.reshape(ids, (-1,))
        at = ops.minimum(ops.cast(ops.searchsorted(self.keys, flat), "int32"), self.features - 2)
        kept = ops.equal(ops.take(self.keys, at), flat)
        return ops.reshape(ops.where(kept, at + 1, 0), ops.shape(ids))

    def cut_to_kept(self, **config) -> LinearNgramLayer:
        """A new bag of this class (``config`` over this one's) holding only the n-grams ``adapt`` kept, its
        features copied and its kernel from zero: the same function, without the table rows no n-gram reaches."""
        kept = int(np.sum(keras.ops.convert_to_numpy(self.keys) != _ABSENT))  # the adapted keys come first
        features = max(kept + 1, 2)
        cut = type(self).from_config({**self.get_config(), **config, "features": features})
        cut.build()
        cut.keys.assign(self.keys[: features - 1])
        cut.scale.assign(self.scale[:features])
        cut.training_texts.assign(self.training_texts)
        return cut

    def penalty(self, kernel):
        return ops.sum(ops.square(kernel)) / (2.0 * self.c * ops.cast(self.training_texts, kernel.dtype))

    def adapt(self, batches) -> None:
        """The kept n-grams and their scale from ``(inputs, labels)`` batches (``inputs["ngrams"]`` as
        :func:`ngram_inputs` makes it): the training split's, never validation's."""
        if not self.built:
            self.build()
        ids, classes, n = [], [], 0  # n: texts read, those without words included
        for inputs, labels in batches:
            n += len(labels)
            ngrams = np.asarray(inputs["ngrams"])
            present = ngrams[..., 1] > 0
            ids.append(ngrams[..., 0][present])
            classes.append(np.broadcast_to(np.asarray(labels).reshape(-1, 1), present.shape)[present])
        keys, at = np.unique(np.concatenate(ids), return_inverse=True)
        held = np.zeros((len(keys), self.num_classes))  # texts of each class holding each n-gram
        np.add.at(held, (at, np.concatenate(classes)), 1.0)
        if len(keys) > self.features - 1:  # the n-grams held by the most texts (ties: the smaller id), ascending
            kept = np.sort(np.lexsort((keys, -held.sum(axis=1)))[: self.features - 1])
            keys, held = keys[kept], held[kept]
        scale = np.zeros(self.scale_shape())
        scale[1 : len(keys) + 1] = self.scale_from(held, n)
        self.keys.assign(np.concatenate([keys, np.full(self.features - 1 - len(keys), _ABSENT)]).astype("int32"))
        self.scale.assign(scale)
        self.training_texts.assign(max(n, 1))

    def get_config(self):
        return {**super().get_config(), "c": self.c}


@keras.saving.register_keras_serializable(package=PACKAGE)
class NaiveBayesNgrams(LinearNgramLayer):
    """Class logits of a linear model on a text's distinct n-grams, each binary feature scaled by its
    naive-Bayes log-count ratio: NBSVM (Wang & Manning 2012), with logistic regression's loss.

    For class c, ``r[f, c] = log((p[f] / |p|) / (q[f] / |q|))``, where ``p`` counts the training texts of
    class c holding n-gram f and ``q`` those of the other classes (one-vs-rest), both plus ``smoothing``, over
    the kept n-grams; the logit is ``sum over the text's distinct n-grams f of r[f, c] * kernel[f, c]``, plus a
    bias.

    >>> nb = NaiveBayesNgrams(num_classes=2, features=16)
    >>> inputs = ngram_inputs(tf.constant(["great tea", "stale"]))
    >>> nb.adapt([(inputs, np.array([1, 0]))])
    >>> tuple(nb(inputs["ngrams"]).shape)
    (2, 2)
    """

    scale_name = "log_count_ratios"

    def __init__(self, num_classes: int, features: int = 2**20, max_n: int = 2, c: float = 1.0,
                 smoothing: float = 1.0, **kwargs):  # fmt: skip
        super().__init__(num_classes, features, max_n, c, **kwargs)
        self.smoothing = smoothing

    def scale_shape(self):
        return (self.features, self.num_classes)

    def scale_from(self, held, n):
        p = held + self.smoothing
        q = held.sum(axis=1, keepdims=True) - held + self.smoothing
        return np.log(p / p.sum(axis=0)) - np.log(q / q.sum(axis=0))

    @property
    def ratios(self):
        return self.scale

    def call(self, ngrams):
        features, counts = self.features_and_counts(ngrams, self.scale.dtype)
        present = ops.cast(counts > 0, self.scale.dtype)[:, :, None]
        weights = ops.take(self.scale, features, axis=0) * ops.take(self.kernel, features, axis=0)
        return ops.cast(ops.sum(weights * present, axis=1) + self.bias, "float32")

    def get_config(self):
        return {**super().get_config(), "smoothing": self.smoothing}


@keras.saving.register_keras_serializable(package=PACKAGE)
class TfidfNgrams(LinearNgramLayer):
    """Class logits of a linear model on a text's TF-IDF vector (one softmax over the classes: multinomial
    logistic regression on scikit-learn's ``TfidfVectorizer(sublinear_tf=True)`` features): each distinct kept
    n-gram weighs ``(1 + log count) * idf``, ``idf = log((1 + n) / (1 + df)) + 1`` from the ``n`` training
    texts (``df`` of them holding it), and the text's vector has unit length.

    >>> tfidf = TfidfNgrams(num_classes=2, features=16)
    >>> inputs = ngram_inputs(tf.constant(["great tea", "stale"]))
    >>> tfidf.adapt([(inputs, np.array([1, 0]))])
    >>> tuple(tfidf(inputs["ngrams"]).shape)
    (2, 2)
    """

    scale_name = "idf"

    def scale_shape(self):
        return (self.features,)

    def scale_from(self, held, n):
        return np.log((1.0 + n) / (1.0 + held.sum(axis=1))) + 1.0  # held.sum(axis=1): each n-gram's df

    def call(self, ngrams):
        features, counts = self.features_and_counts(ngrams, self.kernel.dtype)
        weights = ops.where(counts > 0, 1.0 + ops.log(ops.maximum(counts, 1.0)), 0.0) * ops.take(self.scale, features)
        norm = ops.sqrt(ops.maximum(ops.sum(weights * weights, axis=1, keepdims=True), 1e-12))
        logits = ops.sum(ops.take(self.kernel, features, axis=0) * (weights / norm)[:, :, None], axis=1)
        return ops.cast(logits + self.bias, "float32")
