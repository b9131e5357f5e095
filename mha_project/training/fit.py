"""A fit that keeps its best epoch and can be resumed: ``fit_resumably`` and the Keras callbacks it runs (the
epoch counter, ``history.csv``, the best weights, early stopping that counts the epochs before a resume).

The classifier's fit and a stage before it (pretraining) both use it; the run_record extra hands it the backup
that restores a killed fit."""

from __future__ import annotations

import csv
import dataclasses
import math
import sys
import time
from pathlib import Path

import keras
import numpy as np

from mha_project.atomic import replaced_atomically
from mha_project.errors import ConfigError


@dataclasses.dataclass
class FitPlan:
    """How the classifier's ``fit`` walks the data: ``validations_per_epoch`` validations per pass over it."""

    validations_per_epoch: int
    epochs: int  # Keras epochs: passes x validations_per_epoch
    steps_per_epoch: int

    @property
    def total_steps(self) -> int:
        return self.epochs * self.steps_per_epoch


def plan_fit(trainer, train_ds, texts: int) -> FitPlan:
    """The schedule's length from the pipeline's exact batch count, so the learning rate reaches 0 where
    training ends. Keras validates once per "epoch": with several validations, an epoch is part of a pass."""
    validations = trainer.validations_per_epoch
    batches = int(train_ds.cardinality())
    if validations > batches:
        raise ConfigError(
            f"trainer.validations_per_epoch={validations} is invalid: one pass over {texts} training texts is "
            f"{batches} batches of up to {trainer.batch_size}, so at most {batches} validations fit"
        )
    return FitPlan(validations, trainer.epochs * validations, math.ceil(batches / validations))


@dataclasses.dataclass
class FitResult:
    """What one process's ``fit`` of a stage left: Keras's history, the epoch counter, its seconds."""

    history: keras.callbacks.History
    counter: EpochCounter
    seconds: float

    @property
    def finite(self) -> bool:
        losses = self.history.history.get("loss", [])
        return bool(losses) and all(np.isfinite(losses))


def fit_resumably(
    model, dataset, stage_dir: Path, previous, backup=None, *, before_csv=(), after_csv=(), validation=True,
    epochs: int, validations_per_epoch: int = 1, steps_per_epoch: int | None = None, **fit_args,
) -> FitResult:  # fmt: skip
    """``model.fit`` that a killed process resumes where it stopped (``backup``: a run record's, which restores
    the fit), for the classifier and a stage before it: epochs in ``stage_dir/history.csv``.

    ``dataset`` is one pass over the data (reshuffled by tf.data at each pass); Keras reads it as one stream
    of passes. A resumed fit skips the batches the epochs already trained took, so every later epoch sees the
    batches, in the order, that the fit never killed saw; the backup restores the weights, the optimizer and
    the dropout's random state. The callbacks run in this order: the epoch counter, ``TerminateOnNaN``,
    ``before_csv``, the CSV logger, ``after_csv``, the backup last: an epoch is backed up only once everything
    above has recorded it."""
    history_csv = stage_dir / "history.csv"
    offset = float(previous[-1].get("elapsed_seconds") or 0) if previous else 0.0
    counter = EpochCounter(validations_per_epoch=validations_per_epoch, elapsed_offset=offset)
    callbacks = [
        counter,
        keras.callbacks.TerminateOnNaN(),
        *before_csv,
        HistoryCSVLogger(history_csv, counter, validation=validation, append=bool(previous)),
        *after_csv,
        *([backup] if backup is not None else []),
    ]
    steps_per_epoch = steps_per_epoch or int(dataset.cardinality())
    done = backup.restore(model) if backup is not None else 0  # before fit: how far into the stream it starts
    start = time.perf_counter()
    history = model.fit(
        # The i-th pass is tf.data's i-th reshuffle with the seed in this process too: skipping (not training
        # on) the passes already trained reproduces the order a fit never killed would see.
        dataset.repeat().skip(done * steps_per_epoch),
        callbacks=callbacks,
        shuffle=False,  # tf.data reshuffles every pass with the seed
        verbose="auto" if sys.stdout.isatty() else 2,  # one line per epoch in logs
        epochs=epochs,
        steps_per_epoch=steps_per_epoch,
        **fit_args,
    )
    return FitResult(history, counter, time.perf_counter() - start)


def trained_results(run_dir: Path, fit: FitResult, plan: FitPlan, train_texts: int, monitor: str) -> dict:
    """What the ``trained`` stage records, in passes over the training data: from ``history.csv`` (every epoch,
    across resumes) and this process's fit. The best epoch is the one ``monitor`` picked (BestWeights kept it),
    and ``best_val_accuracy`` is that epoch's."""
    rows = read_history(run_dir / "history.csv")
    best = best_row(rows, monitor) if rows else None
    kept = rows[best - 1] if best else {}
    epochs_run = (max(int(r["epoch"]) for r in rows) if rows else fit.counter.last_epoch) / plan.validations_per_epoch
    passes_now = len(fit.history.history["loss"]) / plan.validations_per_epoch  # in this process
    return dict(
        epochs_run=_epochs(epochs_run),
        monitor=monitor,
        best_val_accuracy=float(kept["val_accuracy"]) if kept.get("val_accuracy") else None,
        best_epoch=_epochs(best / plan.validations_per_epoch) if best else None,
        stopped_early=bool(epochs_run < plan.epochs / plan.validations_per_epoch),
        last_train_accuracy=float(rows[-1]["accuracy"]) if rows and rows[-1].get("accuracy") else None,
        train_seconds=round(fit.counter.elapsed_offset + fit.seconds, 3),
        train_examples_per_second=round(train_texts * passes_now / max(fit.seconds, 1e-9), 1),
    )


def _epochs(value: float):
    return int(value) if float(value).is_integer() else round(value, 3)


def monitor_mode(monitor: str) -> str:
    return "min" if monitor.endswith("loss") else "max"


def best_row(rows: list[dict], monitor: str) -> int:
    """1-based number of the first row with the best ``monitor`` (the epoch BestWeights kept)."""
    sign = -1.0 if monitor_mode(monitor) == "min" else 1.0
    values = [sign * float(r[monitor]) if r.get(monitor) not in (None, "") else float("-inf") for r in rows]
    return values.index(max(values)) + 1


def best_of(rows: list[dict], monitor: str):
    values = [float(r[monitor]) for r in rows if r.get(monitor) not in (None, "")]
    return (min if monitor_mode(monitor) == "min" else max)(values) if values else None


def diverged_message(trainer, counter: EpochCounter, best_weights: Path, validations_per_epoch: int) -> str:
    """The one line a diverged run ends with: the epoch, and what (if anything) is kept."""
    epoch = math.ceil((counter.diverged_epoch or counter.last_epoch + 1) / validations_per_epoch)
    if best_weights.exists():
        kept = f"the best epoch with finite weights is kept in {best_weights}"
    else:
        kept = "no epoch ended with finite weights, so no checkpoint is kept"
    return (
        f"training diverged: loss became NaN/inf in epoch {epoch} of {trainer.epochs} with "
        f"lr={trainer.lr}; {kept} and no test result is recorded; try a smaller lr"
    )


class HistoryCSVLogger(keras.callbacks.CSVLogger):
    """``CSVLogger`` for history.csv that adds the :class:`EpochCounter`'s columns (``elapsed_seconds``,
    ``data_epochs``) to each row, outside the epoch logs: the progress line keeps Keras's one clock and
    TensorBoard does not get a scalar per clock.

    ``validation=False`` (a stage without validation data): Keras's version would add an empty ``val_`` twin
    of every column (written ``NA``) in case validation appears later; then the columns are the logs."""

    def __init__(self, filename, counter, validation: bool = True, **kwargs):
        super().__init__(filename, **kwargs)
        self.counter = counter
        self.validation = validation

    def on_epoch_end(self, epoch, logs=None):
        row = {**(logs or {}), **self.counter.columns}
        if self.keys is None and not self.validation:
            self.keys = sorted(row.keys())
        super().on_epoch_end(epoch + 1, row)  # epochs counted from 1, as Keras's progress line counts them


class EpochCounter(keras.callbacks.Callback):
    """Remembers the last completed epoch and, in ``columns``, ``elapsed_seconds`` (training time since the
    run began, across resumes: ``elapsed_offset`` is what earlier processes trained), which
    :class:`HistoryCSVLogger` writes, so history.csv tells when a validation accuracy was first reached.
    With several validations per epoch it also counts ``data_epochs``, the passes over the data so far."""

    def __init__(self, validations_per_epoch: int = 1, elapsed_offset: float = 0.0):
        super().__init__()
        self.last_epoch = 0
        self.diverged_epoch = None  # the first epoch (1-based) that ended with a NaN/inf loss
        self.start = None
        self.validations_per_epoch = validations_per_epoch
        self.elapsed_offset = elapsed_offset
        self.columns = {}

    def on_train_begin(self, logs=None):
        self.start = time.perf_counter()

    def on_epoch_end(self, epoch, logs=None):
        self.last_epoch = epoch + 1
        if logs is not None and self.diverged_epoch is None and not np.isfinite(logs.get("loss", 0.0)):
            self.diverged_epoch = epoch + 1  # TerminateOnNaN ends fit within this epoch
        if self.start is not None:
            self.columns = {"elapsed_seconds": round(self.elapsed_offset + time.perf_counter() - self.start, 2)}
            if self.validations_per_epoch > 1:  # a Keras "epoch" is one validation: say how much data was seen
                self.columns["data_epochs"] = round((epoch + 1) / self.validations_per_epoch, 3)


class BestWeights(keras.callbacks.Callback):
    """Keep the weights of the best epoch by ``monitor``, written atomically (temp file + rename).

    Only an epoch whose loss and every weight are finite can be "best": a diverged model with NaN
    weights still predicts one class for everything, and so can score the majority share.

    Written here instead of using ``ModelCheckpoint(save_best_only=True)`` because that callback
    writes the .h5 file in place: a run killed mid-write leaves a corrupt "best" checkpoint behind.
    """

    def __init__(self, path, monitor: str = "val_accuracy", mode: str = "max", initial_best: float | None = None):
        super().__init__()
        self.path = Path(path)
        self.monitor = monitor
        self.sign = -1.0 if mode == "min" else 1.0  # compared as sign * value: higher is better
        self.best = -np.inf if initial_best is None else self.sign * initial_best
        self.best_epoch = None  # 1-based, of this process's fit; None while no epoch has been kept

    def on_epoch_end(self, epoch, logs=None):
        logs = logs or {}
        value = logs.get(self.monitor)
        if value is None or not np.isfinite(value) or self.sign * value <= self.best:
            return
        if not np.isfinite(logs.get("loss", 0.0)) or not weights_are_finite(self.model):
            return
        self.best = self.sign * float(value)
        self.best_epoch = epoch + 1
        with replaced_atomically(self.path) as tmp:
            self.model.save_weights(tmp, overwrite=True)


def weights_are_finite(model) -> bool:
    """Whether every weight of ``model`` is finite (no NaN, no inf)."""
    return all(bool(np.isfinite(keras.ops.convert_to_numpy(w)).all()) for w in model.weights)


class ResumedEarlyStopping(keras.callbacks.EarlyStopping):
    """``EarlyStopping`` that, in a resumed fit, counts the epochs trained before the kill
    (``previous``: their history.csv rows) as the fit never killed did, so it stops at the same epoch."""

    def __init__(self, previous: list[dict], **kwargs):
        super().__init__(**kwargs)
        self.previous = [float(row[self.monitor]) if row.get(self.monitor) else None for row in previous]

    def on_train_begin(self, logs=None):
        super().on_train_begin(logs)
        for epoch, value in enumerate(self.previous):  # EarlyStopping.on_epoch_end's count, without stopping
            if value is None or epoch < self.start_from_epoch:
                continue
            self.wait += 1
            if self.best is None or self._improves(value, self.best):
                self.best, self.best_epoch, self.wait = value, epoch, 0

    def _improves(self, value: float, best: float) -> bool:
        """Keras's test of an improvement for ``mode`` max or min (the project monitors with an explicit mode)."""
        if self.mode == "min":
            return value + self.min_delta < best
        return value - self.min_delta > best


def read_history(path: Path) -> list[dict]:
    """history.csv's rows (one per validation, written by :class:`HistoryCSVLogger`)."""
    if not Path(path).exists():
        return []
    with open(path, newline="") as f:
        return [row for row in csv.DictReader(f) if row.get("epoch", "").strip().isdigit()]


def loss_rose_after(history_csv: Path) -> int | None:
    """The epoch with the lowest validation loss when a later epoch's was higher (None: it never rose)."""
    rows = [r for r in read_history(history_csv) if r.get("val_loss") not in (None, "")]
    losses = [float(r["val_loss"]) for r in rows]
    if not losses:
        return None
    best = int(np.argmin(losses))
    return int(rows[best]["epoch"]) if best < len(losses) - 1 and max(losses[best + 1 :]) > losses[best] else None
