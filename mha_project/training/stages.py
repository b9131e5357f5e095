"""The stages of ``train(cfg)`` in the order it runs them (``mha_project/training/train.py`` reads as that
order). A stage that leaves something learned is recorded in ``run.json`` when it finishes, so a resumed run
starts after the last finished one."""

from __future__ import annotations

import dataclasses
import logging
import math
from pathlib import Path

import keras
import numpy as np
import tensorflow as tf
from omegaconf import DictConfig

from mha_project.atomic import write_text_atomic
from mha_project.data.pipeline import TextPreprocessor, pipeline_from_cfg
from mha_project.data.sources import TextSplits, load_dataset
from mha_project.data.vocabulary import run_vectorizer, save_vocabulary
from mha_project.errors import ConfigError, UserError
from mha_project.extending import (
    BACKBONE_SOURCES,
    FIT_CALLBACKS,
    MODEL_READY,
    RESERVED_WORDS,
    SAVED_OUTPUTS,
    STRATEGIES,
)
from mha_project.model.backbone import encoder_blocks
from mha_project.model.classifier import build_classifier, model_summary
from mha_project.run_dir import MODEL_FILE, VOCAB_FILE
from mha_project.training.callbacks import BestWeights, ResumedEarlyStopping, tensorboard_callbacks
from mha_project.training.failures import diverged_message
from mha_project.training.fitting import (
    compile_classifier,
    expected_end_of_data,
    fit_resumably,
    previous_epochs,
    save_model_atomic,
)
from mha_project.training.history import read_history
from mha_project.training.hparams import hparams_of, run_label

log = logging.getLogger(__name__)

BEST_WEIGHTS = Path("checkpoints") / "best.weights.h5"  # inside the run directory


def prepare_process(cfg: DictConfig):
    """The strategy the run trains under (an extra's, ``STRATEGIES``: several devices or processes; else
    TensorFlow's default), seeds and determinism; returns the strategy (the precision is the model's own dtype
    policy, ``build_model``)."""
    strategy = next(filter(None, (make(cfg) for make in STRATEGIES)), None) or tf.distribute.get_strategy()
    replicas = strategy.num_replicas_in_sync
    if cfg.trainer.batch_size < replicas:
        raise ConfigError(
            f"batch_size={cfg.trainer.batch_size} is invalid with {replicas} replicas: the "
            f"global batch is split across replicas, so it must be >= {replicas}"
        )
    keras.utils.set_random_seed(cfg.seed)
    if cfg.deterministic:
        tf.config.experimental.enable_op_determinism()
    return strategy


@dataclasses.dataclass
class Inputs:
    """What the later stages read: the texts, how they become ids (the vocabulary, seq_len, truncation) and the
    three pipelines."""

    data: TextSplits
    preprocessor: TextPreprocessor
    train: tf.data.Dataset
    val: tf.data.Dataset
    test: tf.data.Dataset


def prepare_inputs(cfg: DictConfig, run_dir: Path, strategy=None) -> Inputs:
    """Load the splits, take the run's vocabulary (``data/vocabulary.py``: built, or reloaded when resuming)
    and batch every split. Writes nothing. When several processes train together (the strategy's
    ``num_processes``), each batches all the training texts and keeps its slice of every global batch."""
    data = load_dataset(cfg.data, cfg.seed)
    log.info(
        f"data: {data.name} · classes {data.class_names} · train {len(data.train_texts)} · "
        f"val {len(data.val_texts)} · test {len(data.test_texts)}"
    )
    vectorizer = run_vectorizer(
        cfg.data, data.train_texts, cfg.seed, run_dir / VOCAB_FILE, [w for f in RESERVED_WORDS for w in f(cfg)]
    )
    preprocessor = TextPreprocessor.of_run(cfg.data, vectorizer)
    part = (getattr(strategy, "process_id", 0), getattr(strategy, "num_processes", 1))
    if part[1] > 1:
        batch = cfg.trainer.batch_size
        log.info(f"process {part[0]} of {part[1]}: {batch // part[1]} of each batch of {batch}")
    # Validation (during fit, on every process): each feeds all of it in batches of batch_size / processes, so
    # each global batch holds every text `processes` times, which leaves accuracy and mean loss unchanged.
    # The test runs on process 0 alone, after fit.
    val_batch = cfg.trainer.batch_size // part[1]
    return Inputs(
        data,
        preprocessor,
        pipeline_from_cfg(cfg, data.train_texts, data.train_labels, preprocessor, shuffle=True, part=part),
        pipeline_from_cfg(cfg, data.val_texts, data.val_labels, preprocessor, shuffle=False, batch_size=val_batch),
        pipeline_from_cfg(cfg, data.test_texts, data.test_labels, preprocessor, shuffle=False),
    )


@dataclasses.dataclass
class FitPlan:
    """How the classifier's ``fit`` walks the data: ``validations_per_epoch`` validations per pass over it."""

    validations_per_epoch: int
    epochs: int  # Keras epochs: passes x validations_per_epoch
    steps_per_epoch: int

    @property
    def total_steps(self) -> int:
        return self.epochs * self.steps_per_epoch

    def fit_args(self) -> dict:
        return dict(epochs=self.epochs, steps_per_epoch=self.steps_per_epoch)


def plan_fit(cfg: DictConfig, inputs: Inputs) -> FitPlan:
    """The schedule's length from the pipeline's exact batch count (it counts its bucketed batches), so
    the learning rate reaches 0 where training ends."""
    validations = cfg.trainer.validations_per_epoch
    batches = int(inputs.train.cardinality())
    if validations > batches:
        raise ConfigError(
            f"trainer.validations_per_epoch={validations} is invalid: one pass over {len(inputs.data.train_texts)} "
            f"training texts is {batches} batches of up to {cfg.trainer.batch_size}, so at most {batches} "
            "validations fit"
        )
    # Keras validates once per "epoch": with several validations, a Keras epoch is a part of a repeated pass.
    return FitPlan(validations, cfg.trainer.epochs * validations, math.ceil(batches / validations))


def save_vocabulary_once(run_dir: Path, inputs: Inputs) -> None:
    """``vocab.txt``, once every check has passed (a resumed run's is the one it read)."""
    if not (run_dir / VOCAB_FILE).exists():
        save_vocabulary(inputs.preprocessor.vectorizer, run_dir / VOCAB_FILE)


def backbone_from_extras(cfg: DictConfig, job, record, inputs: Inputs, strategy):
    """The backbone an extra gives the classifier to start from (``BACKBONE_SOURCES``: a pretraining stage),
    or None: the classifier builds its own."""
    found = [source.backbone(cfg, job, record, inputs, strategy) for source in BACKBONE_SOURCES]
    return next((backbone for backbone in found if backbone is not None), None)


def build_model(cfg: DictConfig, run_dir: Path, inputs: Inputs, strategy, plan: FitPlan, backbone=None):
    """The compiled classifier, on ``backbone`` when given (an extra's, pretrained); writes its summary."""
    with strategy.scope():
        vocab_size, num_classes = inputs.preprocessor.vectorizer.vocabulary_size(), inputs.data.num_classes
        model = build_classifier(cfg.model, vocab_size, num_classes, backbone, dtype=cfg.trainer.precision)
        for ready in MODEL_READY:  # what an extra's part learns from the training data first (mha_project/extending.py)
            ready(cfg, model, inputs)
        summary = model_summary(model)  # before compile: the model's parameters, not the optimizer's
        compile_classifier(model, cfg.trainer, plan.total_steps)
    write_text_atomic(run_dir / "model_summary.txt", summary)
    log.info("model:\n" + summary)
    return model


def probes_of(cfg: DictConfig, data: TextSplits) -> tuple[list[str], list | None]:
    """The texts whose attention is logged and drawn, and their labels when they come from validation."""
    attention = cfg.logger.attention
    if attention.probe_texts:
        return list(attention.probe_texts), None
    return data.val_texts[: attention.num_probes], data.val_labels[: attention.num_probes]


def fit_stage(cfg: DictConfig, job, record, model, inputs: Inputs, plan: FitPlan) -> None:
    """``fit`` with early stopping and the best weights kept, and the extras' callbacks
    (``mha_project/extending.py``); records the ``trained`` stage, with what those callbacks report
    (``run_results``)."""
    run_dir = job.run_dir
    best_weights = run_dir / BEST_WEIGHTS
    best_weights.parent.mkdir(exist_ok=True)
    previous = previous_epochs(run_dir)
    extra_callbacks = [callback for factory in FIT_CALLBACKS for callback in factory(cfg, job)]
    monitor, mode = cfg.trainer.monitor, monitor_mode(cfg.trainer.monitor)
    before_csv = [
        BestWeights(best_weights, monitor, mode, initial_best=best_of(previous, monitor)),
        ResumedEarlyStopping(
            previous,
            monitor=monitor,
            mode=mode,
            patience=cfg.trainer.early_stopping_patience * plan.validations_per_epoch,
            # No restore_best_weights: BestWeights keeps the best epoch on disk (it survives a resume),
            # and the test loads it from there; one copy of the best weights, not two.
            # Patience counts from the end of the learning-rate warm-up: with epochs=1000 the warm-up
            # alone is 100 epochs, and validation accuracy rises slowly while the rate is tiny.
            start_from_epoch=int(cfg.trainer.warmup_fraction * plan.epochs),
        ),
        *extra_callbacks,
    ]
    probes, labels = probes_of(cfg, inputs.data) if encoder_blocks(model) else ([], None)  # a bag alone: no attention
    after_csv = tensorboard_callbacks(
        cfg.logger,
        run_dir / "tensorboard",
        inputs.preprocessor,
        probes,
        label=run_label(job),
        labels=labels,
        class_names=inputs.data.class_names,
        profile_batches=tuple(cfg.logger.get("profile_batches") or ()) or 0,  # (start, stop) batches, 0 = off
        log_initial=not previous,  # step 0, the initial weights: once, by the fit that starts from them
    )
    fit = fit_resumably(
        model,
        inputs.train,
        run_dir,
        previous,
        before_csv=before_csv,
        after_csv=after_csv,
        validations_per_epoch=plan.validations_per_epoch,
        validation_data=inputs.val,
        **plan.fit_args(),
    )
    if not fit.finite:
        raise UserError(diverged_message(cfg, fit.counter, best_weights, plan.validations_per_epoch))
    reported = {
        key: value for callback in extra_callbacks for key, value in getattr(callback, "run_results", {}).items()
    }
    results = trained_results(run_dir, fit, plan, len(inputs.data.train_texts), monitor)
    record.finish_stage("trained", **results, **reported)


def trained_results(run_dir: Path, fit, plan: FitPlan, train_texts: int, monitor: str) -> dict:
    """What the ``trained`` stage records, in passes over the training data: from ``history.csv`` (every
    epoch, across resumes) and this process's fit (its seconds and speed). The best epoch is the one
    ``monitor`` picked (BestWeights kept it), and ``best_val_accuracy`` is that epoch's."""
    rows = read_history(run_dir / "history.csv")
    best = best_row(rows, monitor) if rows else None
    kept = rows[best - 1] if best else {}
    epochs_run = (max(int(r["epoch"]) for r in rows) if rows else fit.counter.last_epoch) / plan.validations_per_epoch
    passes_now = (
        len(fit.history.history["loss"]) / plan.validations_per_epoch
    )  # passes over the training data in this process
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


def run_test_once(run_dir: Path, record, model, inputs: Inputs) -> None:
    """Load the epoch that was best on validation and test it, once (the ``tested`` stage)."""
    if (run_dir / BEST_WEIGHTS).exists():
        model.load_weights(run_dir / BEST_WEIGHTS)
    if not record.done("tested"):
        with expected_end_of_data():
            test_loss, test_accuracy = model.evaluate(inputs.test, verbose=0)
        record.finish_stage("tested", test_loss=float(test_loss), test_accuracy=float(test_accuracy))


def save_outputs(cfg: DictConfig, run_dir: Path, record, model, inputs: Inputs) -> None:
    """``model.keras``, then what the extras keep beside it (``export/``): the ``saved`` stage."""
    if record.done("saved"):
        return
    save_model_atomic(model, run_dir / MODEL_FILE)
    for write in SAVED_OUTPUTS:  # the extras' (mha_project/extending.py)
        write(cfg, run_dir, model, inputs)
    record.finish_stage("saved")


def collect_metrics(cfg: DictConfig, record, model, data: TextSplits) -> dict:
    """``metrics.json``: what the finished stages recorded, and what the run was."""
    results = record.results  # what each stage recorded: the fit (and the extras' callbacks), the test, pretraining
    majority = int(np.bincount(np.asarray(data.train_labels)).argmax())  # what a model that learned nothing says
    return {
        **results,
        "params": int(model.count_params()),
        "dataset": data.name,
        "num_classes": data.num_classes,
        "class_names": data.class_names,
        "train_examples": len(data.train_texts),
        "val_examples": len(data.val_texts),
        "test_examples": len(data.test_texts),
        "majority_val_accuracy": float(np.mean(np.asarray(data.val_labels) == majority)),
        "majority_test_accuracy": float(np.mean(np.asarray(data.test_labels) == majority)),
        "data_fingerprint": data.fingerprints(),  # evaluate.py warns when the splits differ from these
        "hparams": hparams_of(cfg),
    }


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
