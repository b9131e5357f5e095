"""``train(cfg)``: data -> model -> keras.fit with callbacks -> test once -> run directory.

A run directory (Hydra's output dir) ends up holding:

    .hydra/            the composed config, overrides            (Hydra)
    history.csv        one row per epoch                         (CSVLogger)
    backup/            state to resume a killed run              (BackupAndRestore, double checkpoint)
    checkpoints/       best weights by val_accuracy              (BestWeights, atomic)
    tensorboard/       scalars, attention images, HParams        (TensorBoard, AttentionLogger)
    model.keras        the trained classifier (token ids -> class probabilities)
    vocab.txt          the TextVectorization vocabulary
    export/            SavedModel: raw strings -> class probabilities
    metrics.json       written last and atomically: its presence means the run finished"""

from __future__ import annotations

import errno
import json
import logging
import math
import sys
import time
import traceback
from pathlib import Path

import keras
import numpy as np
import tensorflow as tf
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from mha_project.analysis.head_view import write_head_view
from mha_project.analysis.runs import STAGE_DIR as PRETRAIN_DIR
from mha_project.analysis.runs import load_model_safely
from mha_project.atomic import write_json_atomic, write_text_atomic
from mha_project.cli import fail
from mha_project.config import validate_config
from mha_project.data.masking import with_mask_token
from mha_project.data.pipeline import pipeline_from_cfg
from mha_project.data.sources import concat_texts, load_dataset, load_unlabeled_texts
from mha_project.data.vocabulary import make_vectorizer, read_vocabulary, save_vocabulary
from mha_project.errors import ConfigError, RunDirRefused, UserError
from mha_project.model.classifier import build_classifier, model_summary
from mha_project.model.pretraining import copy_encoder_weights
from mha_project.training.callbacks import AttentionLogger, BestWeights, EpochCounter, ResumableBackup
from mha_project.training.distribute import make_strategy, use_logical_cpus
from mha_project.training.export import export_inference_model
from mha_project.training.fitting import compile_classifier, expected_end_of_data, save_model_atomic
from mha_project.training.history import backed_up_epochs, read_history, trim_history
from mha_project.training.hparams import hparams_of, write_session_end, write_session_start
from mha_project.training.hydra_callbacks import REFUSED_JOBS
from mha_project.training.pretraining import check_pretrained_source, run_pretraining, uses_pretraining
from mha_project.training.run_dir import STAGES, open_run_dir

# Status lines go through logging: Hydra prints them and keeps them in the run's train.log.
log = logging.getLogger(__name__)


def train(cfg: DictConfig, run_dir: str | Path | None = None) -> dict:
    """Train one model as configured; write the run directory; return the metrics dict.

    The run directory is opened through :func:`mha_project.training.run_dir.open_run_dir` first: locked, and its
    identity checked against ``cfg`` before anything in it is written. The same config again resumes
    after the last finished stage (or reports a finished run); another config is refused.
    """
    validate_config(cfg)  # before any data is loaded or file written
    run_dir = Path(run_dir) if run_dir is not None else _hydra_run_dir()

    try:
        keras.activations.get(cfg.model.activation)
    except ValueError:
        raise ConfigError(
            f"model.activation={cfg.model.activation} is invalid: must be a Keras activation "
            "name such as gelu, relu, silu, tanh"
        ) from None

    record = open_run_dir(run_dir, cfg, overwrite=bool(cfg.get("overwrite", False)))
    try:
        if record.done("finished") and (run_dir / "metrics.json").exists():
            metrics = json.loads((run_dir / "metrics.json").read_text())
            _stop_logging_into(run_dir)  # its train.log is part of the record: nothing happened, nothing is added
            log.info(f"run dir: {run_dir} (already finished; nothing was changed)")
            log.info(
                f"test accuracy: {metrics['test_accuracy']:.4f}  (best val accuracy "
                f"{metrics['best_val_accuracy']:.4f}, {metrics['epochs_run']} epochs)"
            )
            return metrics
        if record.stage != "started" or (run_dir / "history.csv").exists():
            log.info(f"resuming {run_dir} after stage '{record.stage}'")
        try:
            return _train(cfg, run_dir, record)
        except Exception as err:
            if _records_hparams(cfg) and (run_dir / ".hydra" / "config.yaml").exists():
                # The session started (the checks passed): mark it failed for the HParams dashboard.

                try:
                    write_session_end(run_dir / "tensorboard", success=False)
                except Exception as end_err:  # e.g. the disk is still full: the first failure is the news
                    log.warning(f"the TensorBoard session could not be marked failed: {_first_line(end_err)}")
            if _disk_full(err):
                raise UserError(_disk_full_message(err, record)) from None
            raise
    finally:
        record.close()


# What each stage does while it runs (run.json's stage is the last one finished).
STAGE_WORK = {
    "pretrained": "pretraining",
    "trained": "training",
    "tested": "testing",
    "saved": "saving model.keras",
    "exported": "exporting the SavedModel",
    "finished": "writing metrics.json",
}


def _disk_full(err: BaseException) -> bool:
    """Whether ``err`` (or an exception it was raised from) says the disk or quota is full; TensorFlow and
    h5py report it as their own error types with the OS's message inside."""
    seen = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if isinstance(err, OSError) and err.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        if "No space left on device" in str(err) or "Disk quota exceeded" in str(err):
            return True
        err = err.__cause__ or err.__context__
    return False


def _disk_full_message(err: BaseException, record) -> str:

    stage = STAGES[min(STAGES.index(record.stage) + 1, len(STAGES) - 1)]
    file = getattr(err, "filename", None)
    return (
        f"no space left on device while {STAGE_WORK.get(stage, stage)}{f' ({file})' if file else ''}; "
        f"{record.path} keeps what finished before (stage '{record.stage}'): free some space and run the same "
        "command again to resume"
    )


def _first_line(err: BaseException) -> str:
    return f"{type(err).__name__}: {(str(err).strip().splitlines() or [''])[0][:200]}"


def _stop_logging_into(run_dir: Path) -> None:
    """Detach the log files inside ``run_dir`` (Hydra's ``train.log``) from the root logger."""
    root = logging.getLogger()
    for handler in list(root.handlers):
        if isinstance(handler, logging.FileHandler) and Path(handler.baseFilename).parent == run_dir.resolve():
            root.removeHandler(handler)
            handler.close()


def _records_hparams(cfg: DictConfig) -> bool:
    return bool(cfg.logger.tensorboard and cfg.logger.hparams)


def _train(cfg: DictConfig, run_dir: Path, record) -> dict:

    if cfg.trainer.cpu_devices:
        use_logical_cpus(cfg.trainer.cpu_devices)
    strategy = make_strategy(cfg.trainer.distribution)
    if cfg.trainer.batch_size < strategy.num_replicas_in_sync:
        raise ConfigError(
            f"batch_size={cfg.trainer.batch_size} is invalid with {strategy.num_replicas_in_sync} replicas: the "
            f"global batch is split across replicas, so it must be >= {strategy.num_replicas_in_sync}"
        )
    if cfg.trainer.distribution != "none":
        log.info(
            f"distribution: {cfg.trainer.distribution} · replicas {strategy.num_replicas_in_sync} · "
            f"global batch {cfg.trainer.batch_size}"
        )
    keras.utils.set_random_seed(cfg.seed)
    if cfg.deterministic:
        tf.config.experimental.enable_op_determinism()
    keras.mixed_precision.set_global_policy(cfg.trainer.precision)

    data = load_dataset(cfg.data, cfg.seed)
    log.info(
        f"data: {data.name} · classes {data.class_names} · train {len(data.train_texts)} · "
        f"val {len(data.val_texts)} · test {len(data.test_texts)}"
    )
    pretraining = uses_pretraining(cfg)
    vocab_file = run_dir / "vocab.txt"
    if vocab_file.exists():  # resuming: the vocabulary the weights were trained with
        vectorizer = make_vectorizer(None, cfg.data.vocab_size, vocabulary=read_vocabulary(vocab_file))
    else:
        source = f"data.path={cfg.data.path}" if cfg.data.name == "folder" else f"data={cfg.data.name}"
        vectorizer = make_vectorizer(
            data.train_texts, cfg.data.vocab_size, sample=cfg.data.vocab_sample, seed=cfg.seed, source=source
        )
        if pretraining:  # a [MASK] id for the masked-LM stage, in place of the least frequent word
            words = with_mask_token(vectorizer.get_vocabulary(include_special_tokens=False), cfg.data.vocab_size)
            vectorizer = make_vectorizer(None, cfg.data.vocab_size, vocabulary=words)
    pretrained_from = None  # the masked LM (model.keras) whose encoder the classifier starts from
    if cfg.pretrain["from"]:
        source_summary = check_pretrained_source(cfg.pretrain["from"], cfg, vectorizer)
        pretrained_from = Path(cfg.pretrain["from"]) / PRETRAIN_DIR / "model.keras"
    if not vocab_file.exists():
        save_vocabulary(vectorizer, vocab_file)
    seq_len, batch_size = cfg.data.seq_len, cfg.trainer.batch_size

    def pipeline(texts, labels, shuffle):
        return pipeline_from_cfg(cfg, texts, labels, vectorizer, shuffle=shuffle)

    train_ds = pipeline(data.train_texts, data.train_labels, True)
    val_ds = pipeline(data.val_texts, data.val_labels, False)
    test_ds = pipeline(data.test_texts, data.test_labels, False)

    rounds = cfg.trainer.validations_per_epoch  # validation rounds per pass over the training data
    # Exact (the pipeline counts its bucketed batches), so the schedule ends where training does.
    batches_per_pass = int(train_ds.cardinality())
    if rounds > batches_per_pass:
        raise ConfigError(
            f"trainer.validations_per_epoch={rounds} is invalid: one pass over {len(data.train_texts)} training "
            f"texts is {batches_per_pass} batches of up to {batch_size}, so at most {batches_per_pass} validations fit"
        )
    save_run_config(cfg, run_dir)  # every check has passed: the record now describes this run
    if _records_hparams(cfg):
        write_session_start(run_dir / "tensorboard", cfg, trial_id=str(run_dir))  # shows while it runs
    if rounds > 1:
        # Keras validates once per "epoch": make each Keras epoch 1/rounds of a pass over a repeated dataset.
        train_ds = train_ds.repeat()
        steps_per_epoch = math.ceil(batches_per_pass / rounds)
        fit_schedule = dict(epochs=cfg.trainer.epochs * rounds, steps_per_epoch=steps_per_epoch)
    else:
        steps_per_epoch = batches_per_pass
        fit_schedule = dict(epochs=cfg.trainer.epochs)
    total_steps = steps_per_epoch * fit_schedule["epochs"]

    if not record.done("pretrained"):
        summary = None
        if cfg.pretrain["from"]:
            summary = source_summary
        elif cfg.pretrain.objective != "none":
            texts = data.train_texts  # the training split only: never validation or test
            if cfg.pretrain.extra_unlabeled:
                unlabeled = load_unlabeled_texts(cfg.data)
                log.info(f"pretraining also on {len(unlabeled)} unlabeled texts")
                texts = concat_texts(texts, unlabeled)
            with strategy.scope():
                summary = run_pretraining(cfg, run_dir / PRETRAIN_DIR, vectorizer, texts)
        record.finish_stage("pretrained", pretrain=summary)
    if cfg.pretrain.objective != "none":
        pretrained_from = run_dir / PRETRAIN_DIR / "model.keras"
    if pretraining:
        # The classifier's own initial weights must not depend on whether the stage ran in this process
        # (a resume after it) or how much randomness it used; runs without it are untouched.
        keras.utils.set_random_seed(cfg.seed)
    with strategy.scope():
        model = build_classifier(cfg.model, vectorizer.vocabulary_size(), data.num_classes)
        compile_classifier(model, cfg.trainer, total_steps)
        if pretrained_from is not None:
            copied = copy_encoder_weights(load_model_safely(pretrained_from), model)
            log.info(f"encoder initialised from {pretrained_from}: {', '.join(copied)}")
    summary = model_summary(model)
    write_text_atomic(run_dir / "model_summary.txt", summary)
    log.info("model:\n" + summary)

    attention = cfg.logger.attention
    probes = list(attention.probe_texts) or data.val_texts[: attention.num_probes]
    probe_labels = None if attention.probe_texts else data.val_labels[: attention.num_probes]
    history_csv = run_dir / "history.csv"
    best_weights = run_dir / "checkpoints" / "best.weights.h5"
    if not record.done("trained"):
        best_weights.parent.mkdir(exist_ok=True)
        # Rows of an epoch that was cut off before its backup are trained again: drop them first.
        previous = trim_history(history_csv, backed_up_epochs(run_dir / "backup"))
        counter = EpochCounter(
            rounds_per_epoch=rounds, elapsed_offset=float(previous[-1].get("elapsed_seconds") or 0) if previous else 0.0
        )
        callbacks = [
            counter,  # first: its elapsed_seconds reaches CSVLogger
            keras.callbacks.TerminateOnNaN(),
            BestWeights(best_weights, monitor="val_accuracy", initial_best=_best(previous, "val_accuracy")),
            keras.callbacks.EarlyStopping(
                monitor="val_accuracy",
                mode="max",
                patience=cfg.trainer.early_stopping_patience * rounds,
                # No restore_best_weights: BestWeights keeps the best epoch on disk (it survives a resume),
                # and the test below loads it from there; one copy of the best weights, not two.
                # Patience counts from the end of the learning-rate warm-up: with epochs=1000 the warm-up
                # alone is 100 epochs, and validation accuracy rises slowly while the rate is tiny.
                start_from_epoch=int(cfg.trainer.warmup_fraction * fit_schedule["epochs"]),
            ),
            keras.callbacks.CSVLogger(history_csv, append=True),
        ]
        if cfg.logger.tensorboard:
            profile = tuple(cfg.logger.get("profile_batches") or ()) or 0  # (start, stop) batches, 0 = off
            callbacks.append(
                keras.callbacks.TensorBoard(run_dir / "tensorboard", update_freq="epoch", profile_batch=profile)
            )
            if attention.every_n_epochs > 0:
                callbacks.append(
                    AttentionLogger(
                        run_dir / "tensorboard" / "attention",
                        vectorizer,
                        probes,
                        seq_len,
                        attention.every_n_epochs,
                        truncation=cfg.data.truncation,
                        labels=probe_labels,
                        class_names=data.class_names,
                        max_tokens=attention.max_tokens,
                    )
                )
        # Last: saves the epoch's state only after everything above has recorded it.
        callbacks.append(ResumableBackup(run_dir / "backup", history_csv))

        start = time.perf_counter()
        with expected_end_of_data():
            history = model.fit(
                train_ds,
                validation_data=val_ds,
                **fit_schedule,
                callbacks=callbacks,
                shuffle=False,  # tf.data reshuffles every epoch with the seed
                verbose="auto" if sys.stdout.isatty() else 2,  # one line per epoch in logs
            )
        seconds_now = time.perf_counter() - start

        losses = history.history.get("loss", [])
        if not losses or not all(np.isfinite(losses)):
            raise UserError(diverged_message(cfg, counter, best_weights, rounds))
        rows = read_history(history_csv)
        epochs_run = (max(int(r["epoch"]) for r in rows) + 1 if rows else counter.last_epoch) / rounds
        epochs_run = int(epochs_run) if float(epochs_run).is_integer() else round(epochs_run, 3)
        trained_now = len(losses) / rounds  # passes over the training data in this process
        record.finish_stage(
            "trained",
            epochs_run=epochs_run,
            best_val_accuracy=_best(rows, "val_accuracy"),
            train_seconds=round(counter.elapsed_offset + seconds_now, 3),
            train_examples_per_second=round(len(data.train_texts) * trained_now / max(seconds_now, 1e-9), 1),
        )
    if best_weights.exists():
        model.load_weights(best_weights)  # test the epoch that was best on validation

    if not record.done("tested"):
        with expected_end_of_data():
            test_loss, test_accuracy = model.evaluate(test_ds, verbose=0)
        record.finish_stage("tested", test_loss=float(test_loss), test_accuracy=float(test_accuracy))
    if not record.done("saved"):
        save_model_atomic(model, run_dir / "model.keras")
        record.finish_stage("saved")
    if not record.done("exported"):
        export_inference_model(model, vectorizer, seq_len, run_dir / "export", cfg.data.truncation)
        record.finish_stage("exported")
    if attention.html and probes:  # the interactive head view of the probes (analysis/head_view.py)
        write_head_view(
            run_dir / "attention.html",
            model,
            vectorizer,
            probes,
            seq_len,
            data.class_names,
            truncation=cfg.data.truncation,
            title=f"{run_dir.name}: {cfg.model.num_layers} layer(s) x {cfg.model.num_heads} heads, {data.name}",
        )

    results = record.results
    metrics = {
        "test_accuracy": results["test_accuracy"],
        "test_loss": results["test_loss"],
        "best_val_accuracy": results["best_val_accuracy"],
        "epochs_run": results["epochs_run"],
        "train_seconds": results["train_seconds"],
        "train_examples_per_second": results["train_examples_per_second"],
        "params": int(model.count_params()),
        "dataset": data.name,
        "num_classes": data.num_classes,
        "class_names": data.class_names,
        "train_examples": len(data.train_texts),
        "val_examples": len(data.val_texts),
        "test_examples": len(data.test_texts),
        "data_fingerprint": data.fingerprints(),  # evaluate.py warns when the splits differ from these
        "hparams": hparams_of(cfg),
        "pretrain": results.get("pretrain"),
    }
    if _records_hparams(cfg):
        write_session_end(run_dir / "tensorboard", success=True, metrics=metrics)
    write_json_atomic(run_dir / "metrics.json", metrics)  # marks the run as finished
    record.finish_stage("finished")

    log.info(f"run dir: {run_dir}")
    log.info(
        f"test accuracy: {metrics['test_accuracy']:.4f}  (best val accuracy {metrics['best_val_accuracy']:.4f}, "
        f"{metrics['epochs_run']} epochs, {metrics['train_seconds']:.1f}s)"
    )
    return metrics


def diverged_message(cfg: DictConfig, counter, best_weights: Path, rounds: int) -> str:
    """The one line a diverged run ends with: the epoch, and what (if anything) is kept."""
    keras_epoch = counter.diverged_epoch or counter.last_epoch + 1
    epoch = math.ceil(keras_epoch / rounds)
    if best_weights.exists():
        kept = f"the best epoch with finite weights is kept in {best_weights}"
    else:
        kept = "no epoch ended with finite weights, so no checkpoint is kept"
    return (
        f"training diverged: loss became NaN/inf in epoch {epoch} of {cfg.trainer.epochs} with "
        f"lr={cfg.trainer.lr}; {kept} and no test result is recorded; try a smaller lr"
    )


def save_run_config(cfg: DictConfig, run_dir: Path) -> None:
    """``.hydra/config.yaml`` (and Hydra's own ``hydra.yaml`` / ``overrides.yaml`` when run by Hydra).

    Hydra is told not to write these itself (``hydra.output_subdir: null``), because it would do so before
    the run directory's identity is checked: a refused re-run must leave the old run's record untouched.
    """

    hydra_dir = run_dir / ".hydra"
    write_text_atomic(hydra_dir / "config.yaml", OmegaConf.to_yaml(cfg))

    if HydraConfig.initialized():
        hydra_cfg = HydraConfig.get()
        write_text_atomic(hydra_dir / "hydra.yaml", OmegaConf.to_yaml({"hydra": hydra_cfg}))
        write_text_atomic(hydra_dir / "overrides.yaml", OmegaConf.to_yaml(list(hydra_cfg.overrides.task)))


def run_from_cli(cfg: DictConfig):
    """What ``scripts/train.py`` runs: ``train`` plus the error policy of a command-line tool.

    * Single run: a UserError prints one line and exits with code 2 (no traceback).
    * Multirun (sweeps): any failure is recorded in the job's ``failure.json`` and the sweep goes on;
      the job returns NaN, which Optuna records as a failed trial.
    Returns ``metrics[cfg.optimized_metric]`` (what a sweeper optimises), or the metrics dict.
    """

    multirun = HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN
    # A log file on a full disk must not print a traceback per line: the error below says what happened.
    logging.raiseExceptions = False
    try:
        metrics = train(cfg)
    except Exception as err:  # sorted below: user errors vs bugs
        if _disk_full(err) and not isinstance(err, UserError):  # before the run dir's record was open
            err = UserError(f"no space left on device: {_first_line(err)}")
        user_error = isinstance(err, UserError)
        if not multirun:
            if user_error:
                fail(str(err))
            raise
        reason = str(err) if user_error else f"{type(err).__name__}: {err}"
        if isinstance(err, RunDirRefused):  # the job dir holds another run: leave it, note it beside the jobs
            sweep_dir = Path(HydraConfig.get().sweep.dir)
            with open(sweep_dir / REFUSED_JOBS, "a", encoding="utf-8") as f:
                f.write(f"{HydraConfig.get().job.num}\t{reason}\n")
        else:
            write_json_atomic(
                _hydra_run_dir() / "failure.json",
                {
                    "status": "failed",
                    "reason": reason,
                    "overrides": list(HydraConfig.get().overrides.task),
                    "traceback": None if user_error else traceback.format_exc(),
                },
            )
        log.error(f"job {HydraConfig.get().job.num} failed: {reason}")
        return float("nan")
    if cfg.optimized_metric:
        value = metrics.get(cfg.optimized_metric)
        return float("nan") if value is None else float(value)
    return metrics


def _best(rows: list[dict], key: str):
    values = [float(r[key]) for r in rows if r.get(key) not in (None, "")]
    return max(values) if values else None


def _hydra_run_dir() -> Path:

    return Path(HydraConfig.get().runtime.output_dir)
