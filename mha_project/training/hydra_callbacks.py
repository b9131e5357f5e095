"""The Hydra callback around every run and sweep (``hydra.callbacks.validate`` in ``configs/hydra/default.yaml``):
the configuration is checked before Hydra makes any directory, each job of a sweep says whose its lines are,
and a failed job ends as the command-line promises: a single run's error as one line, a sweep's jobs each
recorded while the sweep goes on, and a sweep in which no job finished as a failed command."""

from __future__ import annotations

import logging
import math
from pathlib import Path

from hydra.core.utils import JobReturn, JobStatus
from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from mha_project.config import validate_config
from mha_project.errors import CommandFailed, RunDirRefused, SweepFailed, UserError, failing_the_command

log = logging.getLogger("mha_project.training.train")

REFUSED_JOBS = "refused_jobs.tsv"  # beside a sweep's job dirs: one line per job whose dir holds another run


class FailedJob(float):
    """A sweep job's return value when it failed: NaN, which a sweeper reads as a failed trial, carrying the
    error (Hydra's basic sweeper stops the whole sweep at a job that raises, so a sweep's job returns this)."""

    def __new__(cls, error: BaseException):
        failed = super().__new__(cls, math.nan)
        failed.error = error
        return failed


def job_error(job_return: JobReturn) -> BaseException | None:
    """The error a job ended with: raised (a single run) or returned (a sweep's :class:`FailedJob`)."""
    if job_return.status == JobStatus.FAILED:
        return job_return._return_value
    value = job_return._return_value
    return value.error if isinstance(value, FailedJob) else None


def make_output_dir(path: str, key: str) -> None:
    """Create Hydra's run or sweep directory now, so a place that cannot hold one (``/proc/x``, a file, no
    permission) is one line naming it instead of a traceback from Hydra's own mkdir."""
    try:
        Path(path).mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise UserError(
            f"{key}={path} cannot be used: {err.strerror or err} (a directory is made there for the run)"
        ) from None


class JobPrefix(logging.Filter):
    """Prefixes every line of a record with ``[job N]``."""

    def __init__(self, num) -> None:
        super().__init__()
        self.prefix = f"[job {num}] "

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if not message.startswith(self.prefix):
            record.msg, record.args = "\n".join(self.prefix + line for line in message.splitlines()), ()
        return True


class JobsRetracing(logging.Filter):
    """Drops TensorFlow's "triggered tf.function retracing" warning in a sweep's job: TF counts the functions of
    every model a process built, so a later job hears of the earlier jobs' models (its own traces once each)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "triggered tf.function retracing" not in record.getMessage()


RETRACING = JobsRetracing()


class ValidateConfig(Callback):
    job: JobPrefix | None = None  # a sweep's job, between on_job_start and on_job_end

    @failing_the_command
    def on_run_start(self, config: DictConfig, **kwargs) -> None:
        validate_config(config)  # a ConfigError: the entry point's one line (scripts/entry.py)
        make_output_dir(config.hydra.run.dir, "hydra.run.dir")

    @failing_the_command
    def on_multirun_start(self, config: DictConfig, **kwargs) -> None:
        # A sweeper may open its study in the sweep dir (hparams_search=optuna) before the launcher creates it.
        # Each job is validated by train() itself, so one bad job does not stop the sweep.
        make_output_dir(config.hydra.sweep.dir, "hydra.sweep.dir")

    def on_job_start(self, config: DictConfig, **kwargs) -> None:
        # A sweep's jobs may run at once (hydra/launcher=joblib) and share one terminal: each line says whose
        # it is, Keras's epoch lines included (logged instead of printed, so they pass through the same filter).
        from hydra.core.hydra_config import HydraConfig
        from hydra.types import RunMode

        if HydraConfig.get().mode != RunMode.MULTIRUN:
            return
        self.job = JobPrefix(HydraConfig.get().job.num)
        for handler in logging.getLogger().handlers:
            handler.addFilter(self.job)
        logging.getLogger("tensorflow").addFilter(RETRACING)
        import keras

        keras.config.disable_interactive_logging()  # Keras's lines go to absl's logger, at INFO
        self.absl_level = logging.getLogger("absl").level
        logging.getLogger("absl").setLevel(logging.INFO)

    def on_job_end(self, config: DictConfig, job_return: JobReturn, **kwargs) -> None:
        # Hydra calls on_job_end last to first: this callback, listed first, ends the job after the extras' did.
        error = job_error(job_return)
        if self.job is not None:  # what on_job_start changed, back as it was: the next job runs in this process
            for handler in logging.getLogger().handlers:
                handler.removeFilter(self.job)
            logging.getLogger("tensorflow").removeFilter(RETRACING)
            import keras

            keras.config.enable_interactive_logging()
            logging.getLogger("absl").setLevel(self.absl_level)
            self.job = None
        if error is None:
            return
        if isinstance(job_return._return_value, FailedJob):  # a sweep's job: noted, and the sweep goes on
            reason = str(error) if isinstance(error, UserError) else f"{type(error).__name__}: {error}"
            if isinstance(error, RunDirRefused):  # its dir holds another run: left alone, noted beside the jobs
                with open(Path(config.hydra.sweep.dir) / REFUSED_JOBS, "a", encoding="utf-8") as f:
                    f.write(f"{config.hydra.job.num}\t{reason}\n")
            log.error(f"job {config.hydra.job.num} failed: {reason}")
        elif isinstance(error, UserError):  # a single run's: the entry point's one line, not Hydra's report
            raise CommandFailed(error)

    @failing_the_command
    def on_multirun_end(self, config: DictConfig, **kwargs) -> None:
        # A sweep in which no job finished must end with a non-zero exit status, or scripts and CI read it as success.
        sweep_dir = Path(config.hydra.sweep.dir)
        refused = sweep_dir / REFUSED_JOBS
        if refused.exists():
            lines = refused.read_text(encoding="utf-8").splitlines()
            refused.unlink()  # this sweep's record; the message below carries it
            raise SweepFailed(
                f"{len(lines)} job(s) of the sweep were refused, their run dirs hold other runs "
                f"(first: job {lines[0].replace(chr(9), ': ', 1)}); nothing in them was changed; use a new "
                "hydra.sweep.dir, or add run_record.overwrite=true"
            )
        jobs = [d for d in sweep_dir.iterdir() if d.is_dir()]
        if jobs and not any(sweep_dir.glob("*/metrics.json")):
            raise SweepFailed(f"every job of the sweep failed ({len(jobs)} jobs in {sweep_dir}, none finished)")
