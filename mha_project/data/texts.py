"""Texts held in a list or left on disk, as tf.data reads them.

A source may keep its texts on disk instead of in a list (a folder of files, a TFDS split): an object with
``dataset()`` (a tf.data dataset of the strings, read as it goes), ``subset(indices)`` (the same kind of view)
and ``fingerprint(digest)``, and ``reads_in_order = True`` when a chosen subset must come in file order."""

from __future__ import annotations

from collections.abc import Sequence

import tensorflow as tf


def transcode(raw):
    """Bytes -> valid UTF-8, invalid bytes replaced: tf.data's ``decode(errors="replace")`` for texts read on disk."""
    return tf.strings.unicode_transcode(raw, "UTF-8", "UTF-8", errors="replace")


class ChainedTexts(Sequence):
    """Several text sources one after the other (training + unlabeled texts for pretraining), each still
    streamed by ``text_dataset``."""

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
    """``texts[i] for i in indices``: a list for a list; for texts kept on disk the same kind of view."""
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
