"""The wide part's fit as the data asks (``trainer/schedule_from_data=long_fit``, ``experiment=wide_deep``'s
default): a training split of more than two classes gets the long fit of docs/ngrams.md ("The bag's fit"); no
TensorFlow."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class LongFit:
    """``epochs``, ``early_stopping_patience``, ``monitor``, ``ngram_lr`` and the C grid's ``choice_epochs`` for
    the run when its training split has ``min_classes`` classes or more. The class count decides, not the texts'
    length: the long fit was measured better on every multi-class set (news_outlets' long articles and
    health_tweets' tweets alike), and the two-class sets (fine_foods, IMDB's long reviews) were measured on the
    default fit."""

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
        return f"{splits.num_classes} classes (trainer.schedule_from_data.min_classes={self.min_classes})"
