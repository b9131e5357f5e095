"""Keras callbacks and TensorBoard records that Keras does not ship.

* :class:`AttentionLogger` writes attention heatmaps, score histograms, per-head entropy and the
  probe predictions to TensorBoard every ``every_n_epochs`` epochs (Keras's TensorBoard callback
  logs weights and metrics, not intermediate attention).

TensorBoard tags (documented in the README):
``attention/layer_{l}`` (image), ``attention_scores/layer_{l}`` (histogram),
``attention_entropy/layer_{l}/head_{h}`` (scalar, nats),
``attention_normalized_entropy/layer_{l}/head_{h}`` (scalar, entropy / log n: 1 = uniform),
``attention_probe/{k}`` (text), and each probe's weights for the Attention tab (``attention_weights/...``).

* :class:`ResumableBackup` backs up every epoch, so that a killed run resumes exactly where it stopped."""

from __future__ import annotations

import contextlib
import csv
import json
import logging
import shutil
import time
from pathlib import Path

import keras
import numpy as np
import tensorflow as tf

from mha_project.atomic import replaced_atomically, write_json_atomic
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


class ResumableBackup(keras.callbacks.BackupAndRestore):
    """``BackupAndRestore(double_checkpoint=True)`` that also survives a kill during the first backup and
    keeps the random state of the dropout layers, so that a resumed fit ends as the fit never killed.

    Keras falls back to the previous backup when the latest one is unreadable, but raises when there is
    no previous one (a kill while the first epoch's backup was being written). Then the unreadable
    backup is discarded and training starts again: at most that one epoch is lost.

    Keras's weights files hold no ``SeedGenerator`` state, so a resumed run would draw the first epoch's
    dropout masks again; ``seed_states.json`` keeps them for the last two backed-up epochs (Keras keeps two).
    :meth:`restore` is called before ``fit`` (the caller needs the epoch it resumes from); ``fit``'s
    ``on_train_begin`` then restores nothing twice.
    """

    def __init__(self, backup_dir, history_csv=None):
        super().__init__(str(backup_dir), save_freq="epoch", double_checkpoint=True)
        self.history_csv = history_csv
        self.seed_states = Path(backup_dir) / "seed_states.json"
        self.restored = None

    def restore(self, model) -> int:
        """Load the backup into ``model``; return the epochs it had completed (0 without one)."""
        self.set_model(model)
        try:
            super().on_train_begin()
        except (OSError, ValueError) as err:
            logging.getLogger(__name__).warning(
                f"notice: backup in {self.backup_dir} was cut off mid-write ({type(err).__name__}); "
                "starting this run's training again"
            )
            shutil.rmtree(self.backup_dir, ignore_errors=True)
            if self.history_csv is not None:  # its rows describe the epochs that are now trained again
                trim_history(self.history_csv, 0)
        self.restored = backed_up_epochs(self.backup_dir)
        states = _read_json(self.seed_states).get(str(self.restored))
        if states is not None:
            for variable, value in zip(_seed_variables(model), states):
                variable.assign(np.asarray(value, dtype=variable.dtype))
        return self.restored

    def on_train_begin(self, logs=None):
        if self.restored is None:
            self.restore(self.model)

    def on_epoch_end(self, epoch, logs=None):
        # The seeds first: a backup of epoch e is only ever read with the seed states of epoch e beside it.
        states = _read_json(self.seed_states)
        states = {k: v for k, v in states.items() if int(k) >= epoch}  # this epoch's and the one before it
        states[str(epoch + 1)] = [keras.ops.convert_to_numpy(v).tolist() for v in _seed_variables(self.model)]
        write_json_atomic(self.seed_states, states)
        super().on_epoch_end(epoch, logs)


def _seed_variables(model) -> list:
    """The dropout layers' random state (``SeedGenerator`` variables), in the model's own order."""
    weights = {id(w) for w in model.weights}
    return [v for v in model.variables if id(v) not in weights and "seed_generator" in v.path]


def _read_json(path: Path) -> dict:
    try:
        found = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


def read_history(path: Path) -> list[dict]:
    """history.csv's rows (one per validation, written by :class:`HistoryCSVLogger`)."""
    if not Path(path).exists():
        return []
    with open(path, newline="") as f:
        return [row for row in csv.DictReader(f) if row.get("epoch", "").strip().isdigit()]


def trim_history(path: Path, epochs_done: int) -> list[dict]:
    """Keep history.csv's header and its rows of epochs 1..``epochs_done``; return them. Rewritten in place
    (not renamed) because the CSV logger appends to the same file afterwards."""
    path = Path(path)
    if not path.exists():
        return []
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        fields = reader.fieldnames or []
        all_rows = [r for r in reader if r.get("epoch", "").strip().isdigit()]
    rows = [r for r in all_rows if int(r["epoch"]) <= epochs_done]
    if len(rows) != len(all_rows):
        with open(path, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=fields)
            writer.writeheader()
            writer.writerows(rows)
    return rows


def backed_up_epochs(backup_dir: Path) -> int:
    """Epochs completed according to BackupAndRestore's metadata (0 when there is no backup)."""
    try:
        return int(json.loads((Path(backup_dir) / "training_metadata.json").read_text())["epoch"])
    except (OSError, ValueError, KeyError, TypeError):
        return 0
