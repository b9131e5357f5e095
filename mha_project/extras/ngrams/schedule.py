"""The wide part's fit as the data asks (``trainer/schedule_from_data=wide_deep``, ``experiment=wide_deep``'s
default): a training split of more than two classes gets the long fit, two classes of long texts the long-text
fit (docs/ngrams.md, "The fit the data asks for"); no TensorFlow."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np


@dataclass
class LongFit:
    """``epochs``, ``early_stopping_patience``, ``monitor``, ``ngram_lr`` and the C grid's ``choice_epochs`` for
    the run when its training split has ``min_classes`` classes or more. The class count decides, not the texts'
    length: the long fit was measured better on every multi-class set (news_outlets' long articles and
    health_tweets' tweets alike)."""

    min_classes: int
    epochs: int
    early_stopping_patience: int
    monitor: str
    ngram_lr: float
    choice_epochs: int

    @property
    def settings(self) -> dict:
        """What it sets, as the command line names each key."""
        return {
            "epochs": self.epochs,
            "trainer.early_stopping_patience": self.early_stopping_patience,
            "trainer.monitor": self.monitor,
            "optimizer.ngram_lr": self.ngram_lr,
            "model.choice_epochs": self.choice_epochs,
        }

    def __call__(self, splits) -> str | None:
        """Why these splits get the long fit, or None."""
        if splits.num_classes < self.min_classes:
            return None
        return f"{splits.num_classes} classes (trainer.schedule_from_data.many_classes.min_classes={self.min_classes})"


@dataclass
class LongTextFit:
    """``experiment=imdb_nb``'s fit for texts longer than the default encoder reads: the bag's 1..``max_n``-grams
    in ``features`` slots, the encoder on the last ``seq_len`` tokens (``truncation``), ``epochs`` validated
    ``validations_per_epoch`` times each, ``warmup_fraction``, ``early_stopping_patience``; when the median of
    the first ``sample`` training texts has ``min_median_words`` words or more."""

    min_median_words: int
    sample: int
    max_n: int
    features: int
    seq_len: int
    truncation: str
    epochs: int
    validations_per_epoch: int
    warmup_fraction: float
    early_stopping_patience: int

    @property
    def settings(self) -> dict:
        """What it sets, as the command line names each key."""
        return {
            "model.ngram_branch.max_n": self.max_n,
            "model.ngram_branch.features": self.features,
            "seq_len": self.seq_len,
            "data.truncation": self.truncation,
            "epochs": self.epochs,
            "trainer.validations_per_epoch": self.validations_per_epoch,
            "trainer.warmup_fraction": self.warmup_fraction,
            "trainer.early_stopping_patience": self.early_stopping_patience,
        }

    def __call__(self, splits) -> str | None:
        """Why these splits get the long-text fit, or None."""
        words = int(np.median([len(text.split()) for text in itertools.islice(iter(splits.train_texts), self.sample)]))
        if words < self.min_median_words:
            return None
        return (
            f"a median of {words} words in the first {self.sample} training texts "
            f"(trainer.schedule_from_data.long_texts.min_median_words={self.min_median_words})"
        )


@dataclass
class FitFromData:
    """The first of its fits these splits ask for: ``many_classes``, then ``long_texts``."""

    many_classes: LongFit
    long_texts: LongTextFit

    def __call__(self, splits) -> tuple[str, dict] | None:
        """Why, and what it sets (as the command line names each key); None where the config's own fit stands."""
        for fit in (self.many_classes, self.long_texts):
            why = fit(splits)
            if why is not None:
                return why, fit.settings
        return None
