"""Keras callbacks and TensorBoard records that Keras does not ship.

* :class:`AttentionLogger` writes attention heatmaps, score histograms, per-head entropy and the
  probe predictions to TensorBoard every ``every_n_epochs`` epochs (Keras's TensorBoard callback
  logs weights and metrics, not intermediate attention).

TensorBoard tags (documented in the README):
``attention/layer_{l}`` (image), ``attention_scores/layer_{l}`` (histogram),
``attention_entropy/layer_{l}/head_{h}`` (scalar, nats),
``attention_normalized_entropy/layer_{l}/head_{h}`` (scalar, entropy / log n: 1 = uniform),
``attention_probe/{k}`` (text), and each probe's weights for the Attention tab (``attention_weights/...``).

"""

from __future__ import annotations

import contextlib
import csv
import time
from pathlib import Path

import keras
import numpy as np
import tensorflow as tf

from mha_project.atomic import replaced_atomically
from mha_project.attention.summaries import write_attention_summaries


def tensorboard_callbacks(
    logger_cfg,
    log_dir: Path,
    preprocessor,
    probes: list[str],
    *,
    label: str,
    labels=None,
    class_names=None,
    classify: bool = True,
    profile_batches=0,
    log_initial: bool = True,
    local=None,
) -> list:
    """What a fit logs to TensorBoard (``logger.*``), for the classifier and a pretraining stage alike:
    Keras's scalars every epoch and, every ``logger.attention.every_n_epochs``, the ``probes``' attention
    (images, entropies, the Attention tab's records under ``label``). ``local(model)``: the model as this
    process alone may run it (a copy, when several processes train it)."""
    if not logger_cfg.tensorboard:
        return []
    callbacks = [EpochTensorBoard(log_dir, update_freq="epoch", profile_batch=profile_batches)]
    attention = logger_cfg.attention
    if attention.every_n_epochs > 0 and probes:
        callbacks.append(
            AttentionLogger(
                Path(log_dir),  # the run's own TensorBoard run (its HParams session): no run of its own
                preprocessor,
                probes,
                attention.every_n_epochs,
                labels=labels,
                class_names=class_names,
                max_tokens=attention.max_tokens,
                classify=classify,
                run_label=label,
                log_initial=log_initial,
                local=local,
            )
        )
    return callbacks


class EpochTensorBoard(keras.callbacks.TensorBoard):
    """Keras's ``TensorBoard`` with epochs counted from 1, as Keras's progress line and history.csv count them:
    step k is the end of epoch k, and step 0 the weights before training (the attention records')."""

    def on_epoch_end(self, epoch, logs=None):
        super().on_epoch_end(epoch + 1, logs)


class AttentionLogger(keras.callbacks.Callback):
    """Every ``every_n_epochs`` epochs, log the attention of a fixed set of probe texts to TensorBoard, at step
    k for the end of epoch k; ``log_initial``: also at step 0, the weights training starts from."""

    def __init__(
        self,
        log_dir,
        preprocessor,
        texts,
        every_n_epochs: int = 1,
        labels=None,
        class_names=None,
        max_tokens: int = 24,
        classify: bool = True,
        run_label: str | None = None,
        log_initial: bool = False,
        local=None,
    ):
        super().__init__()
        self.log_initial = log_initial
        self.run_label = run_label  # not None: also the Attention tab's records, under this label
        self.local = local

        self.classify = classify
        self.writer = tf.summary.create_file_writer(str(Path(log_dir)))
        self.preprocessor = preprocessor
        # A probe with no tokens (empty, or punctuation only) has no attention to draw: leave it out.
        keep = [i for i, row in enumerate(preprocessor.encode(list(texts))) if len(row) > 0]
        self.texts = [list(texts)[i] for i in keep]
        labels = None if labels is None else [labels[i] for i in keep]
        self.labels = labels
        self.class_names = class_names
        self.every_n_epochs = every_n_epochs
        self.max_tokens = max_tokens

    def on_train_begin(self, logs=None):
        if self.log_initial and self.texts:  # a fresh fit only: a resumed one's step 0 is already logged
            self._write(0)

    def on_epoch_end(self, epoch, logs=None):
        if self.every_n_epochs and self.texts and (epoch + 1) % self.every_n_epochs == 0:
            self._write(epoch + 1)

    def _write(self, epoch):
        with self.local(self.model) if self.local else contextlib.nullcontext(self.model) as model:
            self._write_for(model, epoch)

    def _write_for(self, model, epoch):
        write_attention_summaries(
            self.writer,
            model,
            self.preprocessor,
            self.texts,
            epoch,  # the step of the epoch scalars (EpochTensorBoard), so the attention lines up with them
            labels=self.labels,
            class_names=self.class_names,
            max_tokens=self.max_tokens,
            classify=self.classify,
            run_label=self.run_label,
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
