"""What a fit logs to TensorBoard: Keras's scalars, and the attention records Keras does not ship.

* :class:`AttentionLogger` writes attention heatmaps, score histograms, per-head entropy and the
  probe predictions to TensorBoard every ``every_n_epochs`` epochs (Keras's TensorBoard callback
  logs weights and metrics, not intermediate attention).

TensorBoard tags (documented in the README):
``attention/layer_{l}`` (image), ``attention_scores/layer_{l}`` (histogram),
``attention_entropy/layer_{l}/head_{h}`` (scalar, nats),
``attention_normalized_entropy/layer_{l}/head_{h}`` (scalar, entropy / log n: 1 = uniform),
``attention_probe/{k}`` (text), and each probe's weights for the Attention tab (``attention_weights/...``).
:func:`write_chosen` adds what a part chose on the validation split before the fit: ``chosen/{name}`` and
``chosen/{name}/val_loss/c={c}`` (and ``val_accuracy``), one scalar per value tried (step 0).

"""

from __future__ import annotations

import contextlib
from pathlib import Path

import keras
import tensorflow as tf

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


def write_chosen(log_dir: Path, chosen: dict) -> None:
    """What ``model.adapt`` chose before the fit (``{name: {"c", "grid", "val_loss", "val_accuracy"}}``), at step
    0: the value chosen and each value's validation scores, one scalar each, so the Scalars tab lists them."""
    writer = tf.summary.create_file_writer(str(log_dir))
    with writer.as_default(step=0):
        for name, choice in chosen.items():
            tf.summary.scalar(f"chosen/{name}", choice["c"])
            for metric in ("val_loss", "val_accuracy"):
                for value, score in zip(choice["grid"], choice[metric]):
                    tf.summary.scalar(f"chosen/{name}/{metric}/c={value:g}", score)
    writer.close()
