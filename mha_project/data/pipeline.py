"""Token ids in tf.data: truncation (``data.truncation``), caching, reshuffling, length buckets."""

from __future__ import annotations

import dataclasses

import numpy as np
import tensorflow as tf

from mha_project.config import TRUNCATIONS
from mha_project.data.texts import text_dataset
from mha_project.data.vocabulary import ragged_ids


def truncate_token_ids(ids, seq_len: int, truncation: str = "head"):
    """Keep ``seq_len`` token ids of every text in a batch (a RaggedTensor), as ``data.truncation`` says.

    ``head`` keeps the first ``seq_len``; ``tail`` the last (what ``keras.utils.pad_sequences`` and so the
    keras.io recipe keep: a review's verdict is usually at its end); ``head_tail`` the first quarter and
    the last three quarters (Sun et al. 2019, "How to Fine-Tune BERT for Text Classification": the first
    128 and last 382 of 512 tokens did best on IMDB). Shorter texts are kept whole.

    >>> import tensorflow as tf
    >>> ids = tf.ragged.constant([[1, 2, 3, 4, 5, 6, 7, 8, 9], [1, 2]])
    >>> truncate_token_ids(ids, 4, "tail").to_list(), truncate_token_ids(ids, 4, "head_tail").to_list()
    ([[6, 7, 8, 9], [1, 2]], [[1, 7, 8, 9], [1, 2]])
    """
    if truncation not in TRUNCATIONS:
        raise ValueError(f"truncation={truncation!r}; expected one of {', '.join(TRUNCATIONS)}")
    lengths = ids.row_lengths()
    kept = tf.minimum(lengths, seq_len)
    head = {"head": seq_len, "tail": 0, "head_tail": seq_len // 4}[truncation]
    # Position j of a kept text reads position j of the text while j < head, else the text's end.
    j = tf.ragged.range(kept)
    row = j.value_rowids()
    j = j.flat_values
    heads = tf.gather(tf.minimum(kept, head), row)
    source = tf.where(j < heads, j, j + tf.gather(lengths - kept, row))
    values = tf.gather(ids.flat_values, tf.gather(ids.row_starts(), row) + source)
    return tf.RaggedTensor.from_row_lengths(values, kept)


@dataclasses.dataclass(frozen=True)
class TextPreprocessor:
    """Text -> token ids as a run trains: its vocabulary (``vectorizer``, a ``TextVectorization``), ``seq_len``
    and ``truncation`` (``data.*``), owned together as a keras-hub preprocessor owns its tokenizer and sequence
    length; the pipelines, the attention tools and a finished run's ``Run`` all tokenise through one.

    >>> import keras
    >>> words = keras.layers.TextVectorization(vocabulary=["the", "coffee", "was", "fresh"])
    >>> [row.tolist() for row in TextPreprocessor(words, seq_len=2, truncation="tail").encode(["the coffee was fresh"])]
    [[4, 5]]
    """

    vectorizer: object
    seq_len: int
    truncation: str = "head"

    def ids_in_graph(self, texts):
        """A string tensor's truncated ids (a RaggedTensor), inside tf.data or a SavedModel."""
        return truncate_token_ids(ragged_ids(self.vectorizer, texts), self.seq_len, self.truncation)

    def encode(self, texts) -> list[np.ndarray]:
        """Token ids per text, truncated to ``seq_len`` (for inspection; training batches with make_pipeline)."""
        ragged = self.ids_in_graph(np.asarray(list(texts), dtype=object))
        return [row.astype("int32") for row in ragged.numpy()]

    def model_inputs(self, model, texts):
        """A classifier's input for ``texts``: their token ids, padded; for a model that reads more of the raw
        text (it has ``text_inputs``: a bag of n-grams), a dict of those ids and its own inputs."""
        return with_text_inputs(model, pad_batch(self.encode(texts)), list(texts))


def with_text_inputs(model, token_ids, texts):
    """``model``'s input: ``token_ids``, with what else it reads from the raw ``texts`` (``text_inputs``), if
    anything (a string tensor in the export, a list of strings elsewhere)."""
    more = getattr(model, "text_inputs", None)
    return token_ids if more is None else {"token_ids": token_ids, **more(texts)}


def pad_batch(token_rows: list[np.ndarray]) -> np.ndarray:
    width = max(1, max(len(r) for r in token_rows))
    out = np.zeros((len(token_rows), width), dtype="int32")
    for i, r in enumerate(token_rows):
        out[i, : len(r)] = r
    return out


def bucket_boundaries(seq_len: int, width: int | None = None) -> list[int]:
    """Longest padded length of each bucket: powers of two from 16, then every ``width`` tokens, then seq_len.

    ``width=None`` keeps powers of two all the way (few shapes: good for XLA). With powers of two a
    130-token review pads to 256 and its T x T attention costs 4x its real length; buckets every 32
    tokens waste at most 31. Keras traces its train step with relaxed shapes, so more buckets cost
    little tracing.
    """
    bounds, b = [], 16
    while b < (seq_len if width is None else min(width, seq_len)):
        bounds.append(b)
        b *= 2
    if width is not None:
        b = width
        while b < seq_len:
            bounds.append(b)
            b += width
    return bounds + [seq_len]


def make_pipeline(texts, labels, preprocessor: TextPreprocessor, batch_size: int, text_inputs=None, **options):
    """tf.data: tokenise and truncate (``preprocessor``) -> then :func:`batch_token_ids` with ``options``
    (``shuffle``, ``seed``, ``bucketing``, ``bucket_width``, ``cache``): cache, reshuffle, bucketed
    batches, prefetch. With ``text_inputs`` (a model's ``text_inputs``), each text rides beside its ids to
    its batch, where ``text_inputs`` adds the model's other inputs: ``({"token_ids": ..., **those}, label)``."""

    def tokenise(text, label):
        ids = tf.cast(preprocessor.ids_in_graph(text), tf.int32)
        return ids, (label if text_inputs is None else (label, text))

    ds = tf.data.Dataset.zip(text_dataset(texts), tf.data.Dataset.from_tensor_slices(np.asarray(labels, "int32")))
    ds = ds.batch(1024).map(tokenise, num_parallel_calls=tf.data.AUTOTUNE).unbatch()
    ds = batch_token_ids(_dense_rows(ds), len(texts), preprocessor.seq_len, batch_size, **options)
    if text_inputs is None:
        return ds
    return ds.map(
        lambda ids, label_text: ({"token_ids": ids, **text_inputs(label_text[1])}, label_text[0]),
        num_parallel_calls=tf.data.AUTOTUNE,
    ).prefetch(tf.data.AUTOTUNE)


def _dense_rows(ds):
    """Rows of a ragged batch come out of tf.data as ragged-rank-0 RaggedTensors; padded_batch wants
    plain tensors."""
    return ds.map(lambda ids, y: (ids if isinstance(ids, tf.Tensor) else ids.flat_values, y))


def pipeline_from_token_ids(rows, labels, seq_len: int, batch_size: int, **options):
    """``make_pipeline`` for texts tokenised and truncated already (``rows``: id arrays, as
    :meth:`TextPreprocessor.encode` returns them)."""
    if any(len(r) > seq_len for r in rows):
        raise ValueError(f"rows longer than seq_len={seq_len}: truncate them first (TextPreprocessor.encode does)")
    rows = [np.asarray(r, "int32") for r in rows]
    ragged = tf.RaggedTensor.from_row_lengths(
        np.concatenate(rows) if rows else np.zeros(0, "int32"), [len(r) for r in rows]
    )
    ds = tf.data.Dataset.from_tensor_slices((ragged, np.asarray(labels, "int32")))
    return batch_token_ids(_dense_rows(ds), len(rows), seq_len, batch_size, **options)


def batch_token_ids(
    ds,
    n: int,
    seq_len: int,
    batch_size: int,
    *,
    shuffle: bool,
    seed: int,
    bucketing: bool = True,
    bucket_width: int | None = None,
    cache: bool = True,
    shuffle_buffer: int | None = None,
    part: tuple[int, int] = (0, 1),
):
    """(ids, label) examples -> cache -> (reshuffle every epoch) -> bucketed batches -> prefetch.

    ``part=(p, P)``: process ``p`` of ``P`` training one model together. Every process shuffles and
    batches all the examples alike (same seed), then keeps the ``p``-th of ``P`` equal slices of each
    batch, so the processes' slices together are exactly the batch one process would have made: no
    example is lost or seen twice, and the optimisation does not depend on ``P``. Every batch must split
    evenly: ``P`` divides ``batch_size`` and ``n``, and ``bucketing`` is off (a bucket's last batch has
    any size).

    ``shuffle_buffer`` (``data.shuffle_buffer``) caps the reshuffle buffer, which otherwise holds every
    example: load_dataset has already put the texts in a seeded random order, so a window of 50k
    still mixes the classes, and memory stops growing with the data beyond it.
    """
    if cache:
        ds = ds.cache()
    # Bucketing hides the number of batches from tf.data, so Keras's first-epoch progress bar would read
    # "1/Unknown" with no ETA. The count is fixed by the lengths alone (shuffling moves texts within
    # their bucket), so one pass over the lengths (which also fills the cache) gives it exactly.
    lengths = np.fromiter(ds.map(lambda ids, y: tf.shape(ids)[0]).as_numpy_iterator(), "int64")
    bounds = bucket_boundaries(seq_len, bucket_width) if bucketing else []
    n_batches = batch_count(lengths, bounds, batch_size)
    if shuffle:
        buffer = n if shuffle_buffer is None else max(1, min(n, shuffle_buffer))
        ds = ds.shuffle(buffer, seed=seed, reshuffle_each_iteration=True)
    if bucketing:
        # Buckets end at `bound` inclusive; padding to the bucket's edge keeps the set of shapes small.
        ds = ds.bucket_by_sequence_length(
            lambda ids, y: tf.shape(ids)[0],
            bucket_boundaries=[b + 1 for b in bounds],
            bucket_batch_sizes=[batch_size] * (len(bounds) + 1),
            pad_to_bucket_boundary=True,
        )
    else:
        scalars = tf.nest.map_structure(lambda _: [], ds.element_spec[1])  # a label (and its text)
        ds = ds.padded_batch(batch_size, padded_shapes=([seq_len], scalars))
    process, processes = part
    if processes > 1:
        if bucketing or batch_size % processes or n % processes:
            raise ValueError(f"{processes} processes cannot split batches of {batch_size} from {n} examples evenly")

        def slice_of(ids, y):
            size = tf.shape(ids)[0] // processes
            return tf.nest.map_structure(lambda t: t[process * size : (process + 1) * size], (ids, y))

        ds = ds.map(slice_of)
    return ds.apply(tf.data.experimental.assert_cardinality(n_batches)).prefetch(tf.data.AUTOTUNE)


def batch_count(lengths, bounds: list[int], batch_size: int) -> int:
    """Batches that ``bucket_by_sequence_length`` makes from texts of these lengths: each bucket
    (lengths up to ``bounds[i]``, the rest in a last bucket) ends with one partial batch.

    >>> batch_count([3, 5, 20, 20, 40], bounds=[16, 32], batch_size=2)
    3
    >>> batch_count([3, 5, 20, 20, 40], bounds=[], batch_size=2)
    3
    """
    buckets = np.searchsorted(np.asarray(bounds, "int64"), np.asarray(lengths, "int64"), side="left")
    return int(sum(-(-n // batch_size) for n in np.bincount(buckets) if n))
