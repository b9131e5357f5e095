"""What ``scripts/train.py`` runs: ``train`` with the error policy of a command-line tool."""

from __future__ import annotations

import logging
import traceback

from omegaconf import DictConfig

from mha_project.errors import CommandFailed, RunDirRefused, UserError
from mha_project.training.failures import describe, disk_full, write_failure
from mha_project.training.hydra_callbacks import REFUSED_JOBS
from mha_project.training.job import Job
from mha_project.training.train import train

log = logging.getLogger("mha_project.training.train")


def run_from_cli(cfg: DictConfig):
    """``train`` in the job Hydra runs now, then:

    * Single run: any error goes on to the entry point (a UserError: one line and exit code 2 there).
    * Multirun (sweeps): any failure is recorded in the job's ``failure.json`` and the sweep goes on;
      the job returns NaN, which Optuna records as a failed trial.
    Returns ``metrics[cfg.optimized_metric]`` (what a sweeper optimises), or the metrics dict.
    """
    job = Job.from_hydra()  # Hydra's state, read once here
    try:
        metrics = train(cfg, job=job)
    except Exception as err:  # sorted below: user errors vs bugs
        if disk_full(err) and not isinstance(err, UserError):  # before the run dir's record was open
            err = UserError(f"no space left on device: {describe(err)}")
        user_error = isinstance(err, UserError)
        if not job.in_sweep:
            if user_error:
                raise CommandFailed(err) from None  # the entry point's one line (scripts/entry.py)
            raise
        reason = str(err) if user_error else f"{type(err).__name__}: {err}"
        if isinstance(err, RunDirRefused):  # the job dir holds another run: leave it, note it beside the jobs
            with open(job.sweep_dir / REFUSED_JOBS, "a", encoding="utf-8") as f:
                f.write(f"{job.num}\t{reason}\n")
        else:
            write_failure(
                job.run_dir, reason, overrides=job.overrides, traceback=None if user_error else traceback.format_exc()
            )
        log.error(f"job {job.num} failed: {reason}")
        return float("nan")
    if cfg.optimized_metric:
        value = metrics.get(cfg.optimized_metric)
        return float("nan") if value is None else float(value)
    return metrics
