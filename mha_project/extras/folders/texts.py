"""A folder dataset's texts, left on disk: each file read when tf.data (or a tool) asks for it."""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import tensorflow as tf

from mha_project.data.sources import TextData
from mha_project.data.texts import transcode
from mha_project.errors import ConfigError
from mha_project.extras.folders.layout import check_folder_dataset


class TextFiles(Sequence):
    """Texts that stay on disk: a folder dataset's file paths, each file read when it is asked for.

    ``data=folder`` keeps these instead of every text in memory; the tf.data pipeline reads the files
    itself (``dataset``), so memory does not grow with the number of texts.
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
            lambda path: transcode(tf.io.read_file(path)),
            num_parallel_calls=tf.data.AUTOTUNE,
            deterministic=True,
        )

    def fingerprint(self, digest) -> None:
        """Each file's path and size: what identifies these texts without reading them."""
        for path in self.paths:
            digest.update(f"{path}\0{os.path.getsize(path) if os.path.exists(path) else -1}\n".encode())

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


def index_text_files(split_dir: Path, class_names: list[str]) -> tuple[list[str], list[int]]:
    """Each class folder's ``.txt`` files (any letter case; subfolders walked in sorted order, files sorted),
    in the order ``keras.utils.text_dataset_from_directory(..., shuffle=False)`` reads them, with their
    class index. Written here because Keras's public API returns only the dataset, not the paths, and the
    texts stay on disk (``TextFiles``); tests/extras/test_folders.py checks the order against Keras's."""
    paths, labels = [], []
    for index, name in enumerate(class_names):
        for folder, _, files in sorted(os.walk(split_dir / name), key=lambda entry: entry[0]):
            found = [os.path.join(folder, f) for f in sorted(files) if f.lower().endswith(".txt")]
            paths += found
            labels += [index] * len(found)
    return paths, labels


def load_folder_splits(data_cfg):
    """((train texts, labels), (test texts, labels), class names) of ``data.path``; the file order, and with it
    the seeded validation split, is Keras's (``index_text_files``)."""
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


def load_unlabeled(data_cfg) -> TextFiles:
    """A folder dataset's ``train/unsup/*.txt`` (aclImdb's 50k unlabeled reviews), for pretraining."""
    root = Path(data_cfg.path) / "train" / "unsup"
    paths = sorted(str(p) for p in root.glob("*") if p.suffix.lower() == ".txt") if root.is_dir() else []
    if not paths:
        raise ConfigError(
            f"pretrain.extra_unlabeled=true: data.path={data_cfg.path} has no train/unsup/*.txt "
            "(the unlabeled texts of the aclImdb layout)"
        )
    return TextFiles(paths)


class FolderData(TextData):
    """``data=folder data.path=DIR``: DIR/train/<class>/*.txt and DIR/test/<class>/*.txt (the aclImdb layout), the
    texts left on disk; DIR/train/unsup/*.txt are its unlabeled texts. The other arguments are ``TextData``'s."""

    def __init__(self, path: str, **common):
        super().__init__(**common)
        self.path = path

    def load(self, seed: int):
        return load_folder_splits(self)

    def unlabeled(self):
        return load_unlabeled(self)
