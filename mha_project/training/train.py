"""``train(cfg)``: data -> model -> compile -> fit with callbacks -> test once -> save: the recipe, top to bottom.

A run directory (Hydra's output dir) ends up holding:

    .hydra/            the composed config, overrides            (save_run_config, after every check)
    run.json           the run's format, last finished stage (and identity: the run_record extra)
    history.csv        one row per epoch                         (HistoryCSVLogger)
    backup/            state to resume a killed run              (the run_record extra)
    checkpoints/       best weights by val_accuracy              (BestWeights, atomic)
    tensorboard/       scalars, attention, HParams               (EpochTensorBoard, AttentionLogger, hparams.py)
    model.keras        the trained classifier (token ids -> class probabilities)
    vocab.txt          the TextVectorization vocabulary
    export/            SavedModel: raw strings -> class probabilities (the export extra)
    attention.html     the interactive head view of the probe texts (the head_view extra)
    metrics.json       written last and atomically: its presence means the run finished
"""

from __future__ import annotations

import logging
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from mha_project.atomic import write_json_atomic, write_text_atomic
from mha_project.checks import check_activation, validate_config
from mha_project.extending import AFTER_FIT, BACKBONE_SOURCES, JOB_RUNNERS, RUN_END, RUN_RECORDS
from mha_project.run_dir import has_attention, new_run
from mha_project.training import stages
from mha_project.training.job import Job
from mha_project.training.reporting import already_finished, failure_told, log_result, next_steps, point_latest_at

# Status lines go through logging: Hydra prints them and keeps them in the run's train.log.
log = logging.getLogger(__name__)


def train(cfg: DictConfig, run_dir: str | Path | None = None, job: Job | None = None) -> dict:
    """Train one model as configured; write the run directory; return the metrics dict.

    ``job`` says where and how the run was started (``Job.from_hydra()`` in ``scripts/train.py``); a test or a
    notebook gives ``run_dir`` instead. The run directory is opened first, before anything in it is written: a
    new or empty one, or as an extra opens it (the run record: the same config again resumes after the last
    finished stage, or reports a finished run; another config is refused).
    """
    job = job if job is not None else Job.of(run_dir)
    validate_config(cfg)  # before any data is loaded or file written
    for run_job in JOB_RUNNERS:  # an extra's way to run this job (another process's part of a run)
        metrics = run_job(cfg, job)
        if metrics is not None:
            return metrics
    check_activation(cfg)
    run_dir = job.run_dir
    open_run = RUN_RECORDS[0] if RUN_RECORDS else new_run  # an extra's: identity, lock, resume, failure record
    with open_run(cfg, job) as record, failure_told(RUN_END, cfg, job):
        if record.finished:
            return already_finished(run_dir)

        # 1. The process: its devices (an extra's strategy), seeds, determinism.
        strategy = stages.prepare_process(cfg)
        # 2. Text -> token ids: the splits, the run's vocabulary and the three pipelines.
        inputs = stages.prepare_inputs(cfg, run_dir, strategy)
        plan = stages.plan_fit(cfg, inputs)
        for source in BACKBONE_SOURCES:  # an extra's backbone (pretrained) must fit this run's model and vocabulary
            source.check(cfg, inputs)
        save_run_config(cfg, job)  # every check has passed: the record now describes this run
        stages.save_vocabulary_once(run_dir, inputs)

        # 3. The model: the classifier, on an extra's backbone if one gives it (pretrained first), compiled.
        backbone = stages.backbone_from_extras(cfg, job, record, inputs, strategy)
        model = stages.build_model(cfg, run_dir, inputs, strategy, plan, backbone)

        # 4. fit, with the callbacks that keep the best weights, stop early, log attention and back up.
        if not record.done("trained"):
            stages.fit_stage(cfg, job, record, model, inputs, plan)
        for after_fit in AFTER_FIT:  # an extra's (several processes: process 0's copy of the weights)
            model = after_fit(cfg, job, model, plan)
            if model is None:
                return {}  # this process's part ended with the fit: it records nothing

        # 5. The test, once, on the best epoch's weights; then model.keras and the extras' files beside it.
        stages.run_test_once(run_dir, record, model, inputs)
        stages.save_outputs(cfg, run_dir, record, model, inputs)

        # 6. metrics.json, written last: its presence means the run finished.
        metrics = stages.collect_metrics(cfg, record, model, inputs.data)
        for run_end in RUN_END:  # the extras' (mha_project/extending.py)
            run_end(cfg, job, metrics)
        write_json_atomic(run_dir / "metrics.json", metrics)
        record.finish_stage("finished")
    point_latest_at(run_dir, job.in_sweep)
    log.info(next_steps(run_dir, attention=has_attention(cfg)))
    log_result(run_dir, metrics, overfit_hint=cfg.logger.overfit_hint)
    return metrics


def save_run_config(cfg: DictConfig, job: Job) -> None:
    """``.hydra/config.yaml`` (and Hydra's own ``hydra.yaml`` / ``overrides.yaml`` when run by Hydra).

    Hydra is told not to write these itself (``hydra.output_subdir: null``), because it would do so before
    the run directory's identity is checked: a refused re-run must leave the old run's record untouched.
    """
    hydra_dir = job.run_dir / ".hydra"
    write_text_atomic(hydra_dir / "config.yaml", OmegaConf.to_yaml(cfg))
    if job.hydra is not None:
        write_text_atomic(hydra_dir / "hydra.yaml", OmegaConf.to_yaml({"hydra": job.hydra}))
        write_text_atomic(hydra_dir / "overrides.yaml", OmegaConf.to_yaml(list(job.overrides)))
