"""What every ``fit`` in the project shares: the schedule, the training variables, atomic saves."""

from __future__ import annotations

import contextlib
import dataclasses
import sys
import time
import warnings
from pathlib import Path

import keras
import numpy as np

from mha_project.atomic import replaced_atomically
from mha_project.extending import FIT_BACKUPS, LOSSES, OPTIMIZERS
from mha_project.model.classifier import uncompiled_copy
from mha_project.training.callbacks import EpochCounter, HistoryCSVLogger
from mha_project.training.history import backed_up_epochs, trim_history
from mha_project.training.schedules import WarmupCosine


def warmup_cosine(lr: float, warmup_fraction: float, total_steps: int):
    """A linear warm-up over ``warmup_fraction`` of ``total_steps``, then cosine decay to 0."""
    warmup_steps = int(warmup_fraction * total_steps)
    return WarmupCosine(peak=lr, warmup_steps=warmup_steps, decay_steps=total_steps - warmup_steps)


def classifier_optimizer(model, trainer_cfg, total_steps: int):
    """AdamW (clipped gradients) on the warm-up + cosine schedule, or an extra's optimizer for this model
    (``OPTIMIZERS``: a second rate for a bag of n-grams)."""

    def adamw(lr: float):
        schedule = warmup_cosine(lr, trainer_cfg.warmup_fraction, total_steps)
        return keras.optimizers.AdamW(
            learning_rate=schedule, weight_decay=trainer_cfg.weight_decay, clipnorm=trainer_cfg.clipnorm
        )

    for optimizer in OPTIMIZERS:
        found = optimizer(model, trainer_cfg, adamw)
        if found is not None:
            return found
    return adamw(trainer_cfg.lr)


def classifier_loss(model):
    """Sparse categorical cross-entropy, or an extra's loss for this model (``LOSSES``: one-vs-rest)."""
    found = (loss(model) for loss in LOSSES)
    return next((loss for loss in found if loss is not None), "sparse_categorical_crossentropy")


def compile_classifier(model, trainer_cfg, total_steps: int) -> None:
    """:func:`classifier_optimizer`, :func:`classifier_loss`, accuracy."""
    model.compile(
        optimizer=classifier_optimizer(model, trainer_cfg, total_steps),
        loss=classifier_loss(model),
        metrics=["accuracy"],
        # trainer.jit_compile is TensorFlow's XLA switch; on JAX, not compiling means running op by op.
        jit_compile=trainer_cfg.jit_compile or keras.backend.backend() == "jax",
        steps_per_execution=trainer_cfg.steps_per_execution,
    )
    create_training_variables(model)


def create_training_variables(model) -> None:
    """Create the optimizer's slots and the metrics' counters before ``fit`` traces its train step.

    Keras (TensorFlow backend, no distribution strategy) defers both to the first traced step, and
    ``tf.function`` traces a function that creates variables twice (only the first call may create
    them): created here, the step is traced once per ``fit``, not twice.
    """
    model.optimizer.build(model.trainable_variables)
    num_classes = int(model.output_shape[-1])
    model.compute_metrics(None, np.zeros((1,), "int32"), np.full((1, num_classes), 1.0 / num_classes, "float32"))
    model.reset_metrics()


@contextlib.contextmanager
def expected_end_of_data():
    """Bucketed batches make an epoch's length unknown to Keras up front, so its "ran out of data"
    warning is expected, not a bug. Scoped: the caller's warning filters stay as they were."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Your input ran out of data")
        yield


def save_model_atomic(model, path: Path) -> None:
    """``model.save`` of the model without its optimizer (resuming reads ``backup/``, never this file, and the
    optimizer's state is two thirds of the file), to a temporary name, then renamed: a kill mid-save never
    leaves a broken model.keras."""
    # An uncompiled twin with the same weights: Keras's save has no switch to leave the optimizer out.
    with replaced_atomically(path) as tmp:
        uncompiled_copy(model).save(tmp)


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


def previous_epochs(stage_dir: Path) -> list[dict]:
    """The ``history.csv`` rows of a stage being resumed, less those of an epoch cut off before its backup
    (that epoch is trained again)."""
    return trim_history(stage_dir / "history.csv", backed_up_epochs(stage_dir / "backup"))


def fit_resumably(
    model,
    dataset,
    stage_dir: Path,
    previous: list[dict],
    *,
    before_csv=(),
    after_csv=(),
    validation: bool = True,
    validations_per_epoch: int = 1,
    epochs: int,
    steps_per_epoch: int | None = None,
    **fit_args,
) -> FitResult:
    """``model.fit`` that a killed process resumes where it stopped (given an extra's backup, ``FIT_BACKUPS``),
    for the classifier and the pretraining stage alike: epochs in ``stage_dir/history.csv``, the backup in
    ``stage_dir/backup``.

    ``dataset`` is one pass over the data (reshuffled by tf.data at each pass); Keras reads it as one stream
    of passes, ``steps_per_epoch`` batches an epoch (default: one pass). A resumed fit skips the batches the
    epochs already trained took, so every later epoch sees the batches, in the order, that the run never
    killed saw; the backup restores the weights, the optimizer and the dropout's random state.

    The callbacks run in this order: ``EpochCounter`` (``elapsed_seconds`` across resumes, for the CSV),
    ``TerminateOnNaN``, ``before_csv``, the CSV logger, ``after_csv``, and the backup last: an epoch is
    backed up only after everything above has recorded it.
    """
    history_csv = stage_dir / "history.csv"
    offset = float(previous[-1].get("elapsed_seconds") or 0) if previous else 0.0
    counter = EpochCounter(validations_per_epoch=validations_per_epoch, elapsed_offset=offset)
    backups = [make(stage_dir / "backup", history_csv) for make in FIT_BACKUPS][:1]
    callbacks = [
        counter,
        keras.callbacks.TerminateOnNaN(),
        *before_csv,
        HistoryCSVLogger(history_csv, counter, validation=validation, append=True),
        *after_csv,
        *backups,
    ]
    steps_per_epoch = steps_per_epoch or int(dataset.cardinality())
    done = backups[0].restore(model) if backups else 0  # before fit: how far into the stream the fit starts
    start = time.perf_counter()
    with expected_end_of_data():
        history = model.fit(
            # The i-th pass is tf.data's i-th reshuffle with the seed in this process too: skipping (not
            # training on) the passes already trained reproduces the order a fit never killed would see.
            dataset.repeat().skip(done * steps_per_epoch),
            callbacks=callbacks,
            shuffle=False,  # tf.data reshuffles every pass with the seed
            verbose="auto" if sys.stdout.isatty() else 2,  # one line per epoch in logs
            epochs=epochs,
            steps_per_epoch=steps_per_epoch,
            **fit_args,
        )
    return FitResult(history, counter, time.perf_counter() - start)
