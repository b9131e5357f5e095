"""TFDS's splits as the core's text splits, the texts left in TFDS's prepared files."""

from __future__ import annotations

import logging
import numbers
import socket
from collections.abc import Sequence

import numpy as np
import tensorflow as tf
import tensorflow_datasets as tfds

from mha_project.data.sources import TextData
from mha_project.data.texts import transcode
from mha_project.errors import ConfigError
from mha_project.quiet import loggers_at

# Hosts that tensorflow_datasets downloads these datasets from; probed once, with a short timeout,
# so an offline machine gets an answer in seconds instead of TFDS's minutes of retries.
DOWNLOAD_HOSTS = {"imdb_reviews": "ai.stanford.edu", "ag_news_subset": "drive.google.com"}

OFFLINE_OPTIONS = (
    "offline options: data=fine_foods (built in), data=folder data.path=DIR "
    "(DIR/train/<class>/*.txt, DIR/test/<class>/*.txt), or data.data_dir=DIR holding a prepared TFDS copy"
)


class TfdsTexts(Sequence):
    """Texts of one TFDS split left in TFDS's prepared files: the positions of the chosen records only.

    tf.data reads the records as it goes (``dataset``: TFDS's own reader, skipping the records not chosen).
    TFDS reads a split sequentially, so a selection comes back in file order: ``indices`` must ascend, and
    the core's ``load_dataset`` sorts each split's positions (``reads_in_order``; training reshuffles anyway).

    Args:
        name: the TFDS dataset (``imdb_reviews``).
        split: the split (``train``).
        data_dir: where TFDS keeps it (``None``: ``~/tensorflow_datasets``).
        size: the number of records in the split.
        indices: ascending positions of the chosen records; ``None`` means all.
    """

    reads_in_order = True

    def __init__(self, name: str, split: str, data_dir, size: int, indices=None):
        self.name, self.split, self.data_dir, self.size = name, split, data_dir, int(size)
        self.indices = np.arange(self.size) if indices is None else np.asarray(indices, dtype=np.int64)
        if np.any(np.diff(self.indices) <= 0):
            raise ValueError("TfdsTexts reads records in file order: indices must ascend")

    def __len__(self) -> int:
        return len(self.indices)

    def dataset(self):
        records = tfds.load(self.name, split=self.split, as_supervised=True, data_dir=self.data_dir, download=False)
        if len(self.indices) == self.size:
            return records.map(lambda text, label: transcode(text))
        chosen = np.zeros(self.size, dtype=bool)
        chosen[self.indices] = True
        chosen = tf.constant(chosen)
        return (
            records.enumerate()
            .filter(lambda i, record: tf.gather(chosen, i))
            .map(lambda i, record: transcode(record[0]))
        )

    def fingerprint(self, digest) -> None:
        """The dataset, split and chosen positions: what identifies these texts without reading them."""
        digest.update(f"{self.name}/{self.split}/{self.size}\n".encode() + self.indices.tobytes())

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


def load_tfds_splits(data_cfg):
    """((train texts, labels), (test texts, labels), class names) of ``data.tfds_name``."""
    name = data_cfg.tfds_name
    with loggers_at(logging.ERROR, "absl"):  # "Variant folder ... has no dataset_info.json": not prepared, said below
        builder = tfds.builder(name, data_dir=data_cfg.data_dir)
        prepared = builder.is_prepared()
    if not prepared:
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


def load_unlabeled(data_cfg) -> TfdsTexts:
    """IMDB's 50k reviews of TFDS's ``unsupervised`` split, for pretraining."""
    ds = tfds.load(data_cfg.tfds_name, split="unsupervised", as_supervised=True, data_dir=data_cfg.data_dir)
    size = int(ds.reduce(np.int64(0), lambda count, record: count + 1))
    return TfdsTexts(data_cfg.tfds_name, "unsupervised", data_cfg.data_dir, size)


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


class TfdsData(TextData):
    """``data=imdb`` / ``data=ag_news``: a TensorFlow Datasets text dataset (``tfds_name``), downloaded once or read
    from a prepared ``data_dir``; IMDB's ``unsupervised`` split is its unlabeled texts."""

    def __init__(self, tfds_name: str, data_dir=None, download: bool = True, **common):
        super().__init__(**common)
        self.tfds_name, self.data_dir, self.download = tfds_name, data_dir, download

    def load(self, seed: int):
        return load_tfds_splits(self)

    def unlabeled(self):
        if self.tfds_name != "imdb_reviews":
            return super().unlabeled()
        return load_unlabeled(self)
