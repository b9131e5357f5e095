"""``train(cfg)``: data -> model -> keras.fit with callbacks -> test once -> run directory.

A run directory (Hydra's output dir) ends up holding:

    .hydra/            the composed config, overrides            (Hydra)
    run.json           the run's identity and last finished stage (run_dir.py)
    history.csv        one row per epoch                         (CSVLogger)
    backup/            state to resume a killed run              (BackupAndRestore, double checkpoint)
    checkpoints/       best weights by val_accuracy              (BestWeights, atomic)
    tensorboard/       scalars, attention images, HParams        (TensorBoard, AttentionLogger)
    model.keras        the trained classifier (token ids -> class probabilities)
    vocab.txt          the TextVectorization vocabulary
    export/            SavedModel: raw strings -> class probabilities
    attention.html     the interactive head view of the probe texts
    metrics.json       written last and atomically: its presence means the run finished
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shlex
import tempfile
import traceback
from pathlib import Path

import keras
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from mha_project.atomic import write_json_atomic, write_text_atomic
from mha_project.checks import processes, validate_config
from mha_project.cli import fail, plural
from mha_project.errors import ConfigError, RunDirRefused, UserError
from mha_project.run_dir import FAILURE_FILE, LATEST, has_attention, latest_target, latest_text, open_run_dir
from mha_project.training import stages
from mha_project.training.distribute import several_processes
from mha_project.training.failures import disk_full, disk_full_message, first_line
from mha_project.training.hparams import write_experiment, write_session_end, write_session_start
from mha_project.training.hydra_callbacks import REFUSED_JOBS
from mha_project.training.pretraining import check_pretrained_source

# Status lines go through logging: Hydra prints them and keeps them in the run's train.log.
log = logging.getLogger(__name__)


def train(cfg: DictConfig, run_dir: str | Path | None = None) -> dict:
    """Train one model as configured; write the run directory; return the metrics dict.

    The run directory is opened through :func:`mha_project.run_dir.open_run_dir` first: locked, and
    its identity checked against ``cfg`` before anything in it is written. The same config again resumes
    after the last finished stage (or reports a finished run); another config is refused.
    """
    validate_config(cfg)  # before any data is loaded or file written
    run_dir = Path(run_dir) if run_dir is not None else _hydra_run_dir()
    if _helper_process(cfg):
        # Processes other than 0 of a data-parallel run train the same model and record nothing.
        _stop_logging_into(run_dir)  # not even in Hydra's train.log (the run dir may be process 0's)
        quiet = OmegaConf.merge(cfg, {"logger": {"tensorboard": False, "attention": {"html": False}}})
        with tempfile.TemporaryDirectory(prefix="mha-project-process-") as scratch:
            return _train_into(quiet, Path(scratch))
    return _train_into(cfg, run_dir)


def _train_into(cfg: DictConfig, run_dir: Path) -> dict:
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
            return _already_finished(run_dir)
        if record.stage != "started" or (run_dir / "history.csv").exists():
            if processes() > 1:
                # The other processes keep no backup (they record nothing), so they would start from epoch 0.
                raise UserError(
                    f"{run_dir} holds a run that stopped after stage '{record.stage}'; several processes "
                    f"(KERAS_DISTRIBUTION_NUM_PROCESSES={processes()}) cannot resume it, as only process 0 kept "
                    "its state: resume it as one process, or start a new hydra.run.dir"
                )
            log.info(f"resuming {run_dir} after stage '{record.stage}'")
        with contextlib.suppress(FileNotFoundError):
            (run_dir / FAILURE_FILE).unlink()  # an earlier try's record: this try decides again
        try:
            return _run_stages(cfg, run_dir, record)
        except Exception as err:
            _record_failure(run_dir, record, err)
            if _records_hparams(cfg) and (run_dir / ".hydra" / "config.yaml").exists():
                # The session started (the checks passed): mark it failed for the HParams dashboard.
                try:
                    write_session_end(run_dir / "tensorboard", success=False)
                except Exception as end_err:  # e.g. the disk is still full: the first failure is the news
                    log.warning(f"the TensorBoard session could not be marked failed: {first_line(end_err)}")
            if disk_full(err):
                raise UserError(disk_full_message(err, record)) from None
            raise
    finally:
        record.close()


def _record_failure(run_dir: Path, record, err: Exception) -> None:
    """``failure.json``: why the run stopped, for the tools that read the directory (and for a person)."""
    reason = str(err) if isinstance(err, UserError) else f"{type(err).__name__}: {first_line(err)}"
    if disk_full(err):
        reason = disk_full_message(err, record)
    try:
        write_json_atomic(run_dir / FAILURE_FILE, {"status": "failed", "stage": record.stage, "reason": reason})
    except OSError as write_err:  # e.g. the disk is full: the error itself is the news
        log.warning(f"{FAILURE_FILE} could not be written: {first_line(write_err)}")


def _helper_process(cfg: DictConfig) -> bool:
    process_id = os.environ.get("KERAS_DISTRIBUTION_PROCESS_ID", "0")  # Keras's own (keras.distribution)
    return cfg.trainer.distribution == "data_parallel" and process_id not in ("", "0")


def _in_sweep() -> bool:
    return HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN


def _run_stages(cfg: DictConfig, run_dir: Path, record) -> dict:
    strategy = stages.prepare_process(cfg)
    inputs = stages.prepare_inputs(cfg, run_dir, strategy)
    plan = stages.plan_fit(cfg, inputs)
    source = check_pretrained_source(cfg, inputs.vectorizer) if cfg.pretrain.from_run else None
    save_run_config(cfg, run_dir)  # every check has passed: the record now describes this run
    stages.save_vocabulary_once(run_dir, inputs)
    if _records_hparams(cfg):
        if not _in_sweep():  # a sweep's experiment config is the sweep directory's (hydra_callbacks.py)
            write_experiment(run_dir / "tensorboard", cfg, domains=None)
        write_session_start(run_dir / "tensorboard", cfg, run_dir, _in_sweep())  # shows while it runs

    pretrained_from = stages.pretrain_stage(cfg, run_dir, record, inputs, strategy, source)
    model = stages.build_model(cfg, run_dir, inputs, strategy, plan, pretrained_from)
    if not record.done("trained"):
        stages.fit_stage(cfg, run_dir, record, model, inputs, plan)
    if several_processes():
        if strategy.process_id != 0:
            return {}  # the other processes' part ends with the fit; they record nothing
        model = stages.on_process_zero_alone(cfg, model, plan)
    stages.test_save_export(cfg, run_dir, record, model, inputs)
    stages.write_probe_head_view(cfg, run_dir, model, inputs)

    metrics = stages.collect_metrics(cfg, record, model, inputs.data)
    if _records_hparams(cfg):
        write_session_end(run_dir / "tensorboard", success=True, metrics=metrics)
    write_json_atomic(run_dir / "metrics.json", metrics)  # marks the run as finished
    record.finish_stage("finished")
    point_latest_at(run_dir)
    log.info(next_steps(run_dir, head_view=(run_dir / "attention.html").exists(), attention=has_attention(cfg)))
    _log_result(run_dir, metrics, overfit_hint=cfg.logger.overfit_hint)
    return metrics


def point_latest_at(run_dir: Path) -> None:
    """``outputs/runs/latest`` (``outputs/debug/latest`` for ``debug=...`` runs): the file naming the last run
    that finished there; never for other run dirs, and never over a ``latest`` that is not the project's."""
    runs = run_dir.resolve().parent
    if runs.name not in ("runs", "debug") or runs.parent.name != "outputs" or _in_sweep():
        return
    latest = runs / LATEST
    if (latest.exists() or latest.is_symlink()) and latest_target(latest) is None:
        return  # a folder, link or file of the user's called "latest": left alone
    write_text_atomic(latest, latest_text(run_dir.resolve()))  # a reader sees the old name or the new one


def next_steps(run_dir: Path, head_view: bool, attention: bool = True) -> str:
    """What a learner can do with the finished run, with its real path (quoted for a shell where needed);
    the attention tools only for a model that has attention."""
    where = shlex.quote(str(run_dir))
    lines = [f"python scripts/evaluate.py {where}"]
    if attention:
        lines += [
            f'python scripts/inspect_attention.py {where} "a sentence of your own"',
            f"python scripts/head_patterns.py {where}",
        ]
    lines.append(f"tensorboard --logdir {where}")
    if head_view:
        lines.append(f"open {shlex.quote(str(run_dir / 'attention.html'))} in a browser: the interactive head view")
    return "next:\n  " + "\n  ".join(lines)


def _already_finished(run_dir: Path) -> dict:
    metrics = json.loads((run_dir / "metrics.json").read_text())
    _stop_logging_into(run_dir)  # its train.log is part of the record: nothing happened, nothing is added
    _log_result(run_dir, metrics, finished_before=True)
    return metrics


def _log_result(run_dir: Path, metrics: dict, finished_before: bool = False, overfit_hint: bool = True) -> None:
    log.info(f"run dir: {run_dir}" + (" (already finished; nothing was changed)" if finished_before else ""))
    seconds = "" if finished_before else f", {metrics['train_seconds']:.1f}s"
    log.info(
        f"test accuracy: {metrics['test_accuracy']:.4f}  (best val accuracy {metrics['best_val_accuracy']:.4f}, "
        f"{plural(metrics['epochs_run'], 'epoch')}{seconds})"
    )
    log.info(tested_weights_line(metrics, overfit_hint))


def tested_weights_line(metrics: dict, overfit_hint: bool = True) -> str:
    """Which epoch's weights the test used, and why training stopped where it did."""
    line = f"tested epoch {metrics['best_epoch']}'s weights (the best val accuracy)"
    hp = metrics["hparams"]
    if metrics["stopped_early"]:
        line += (
            f"; early stopping ended training after epoch {metrics['epochs_run']} of {hp['epochs']}: val accuracy "
            "had not improved for trainer.early_stopping_patience epochs"
        )
    else:
        line += f"; trained all {plural(hp['epochs'], 'epoch')}" if hp["epochs"] > 1 else "; trained its one epoch"
    train_acc = metrics["last_train_accuracy"]
    if overfit_hint and train_acc is not None and train_acc - metrics["best_val_accuracy"] > 0.1:
        line += f"; training accuracy {train_acc:.2f} ran ahead of validation: the model overfits (try more dropout)"
    return line


def _stop_logging_into(run_dir: Path) -> None:
    """Detach the log files inside ``run_dir`` (Hydra's ``train.log``) from the root logger."""
    root = logging.getLogger()
    for handler in list(root.handlers):
        if isinstance(handler, logging.FileHandler) and Path(handler.baseFilename).parent == run_dir.resolve():
            root.removeHandler(handler)
            handler.close()


def _records_hparams(cfg: DictConfig) -> bool:
    return bool(cfg.logger.tensorboard and cfg.logger.hparams)


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
        if disk_full(err) and not isinstance(err, UserError):  # before the run dir's record was open
            err = UserError(f"no space left on device: {first_line(err)}")
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
                _hydra_run_dir() / FAILURE_FILE,
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


def _hydra_run_dir() -> Path:
    return Path(HydraConfig.get().runtime.output_dir)
