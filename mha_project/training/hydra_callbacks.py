"""Hydra callbacks: validate the configuration before Hydra creates or writes any run directory.

``on_run_start`` runs before Hydra makes the run directory, so a bad value fails before any directory
exists. (Hydra writes no ``.hydra/`` into run directories here, ``hydra.output_subdir: null``; ``train()``
writes it once the run directory is opened and every check has passed, see ``training/train.py``.)
In a multirun each job is validated by ``train()`` instead, so one bad job does not stop the sweep."""

from __future__ import annotations

import logging
import shlex
from pathlib import Path

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from mha_project.checks import validate_config
from mha_project.cli import import_tensorflow_quietly
from mha_project.errors import SweepFailed, UserError, failing_the_command
from mha_project.extending import SWEEP_NEXT_STEPS, SWEEP_START

# Beside the job dirs of a sweep: one line per job refused because its dir holds another run.
REFUSED_JOBS = "refused_jobs.tsv"


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


class ValidateConfig(Callback):
    job: JobPrefix | None = None  # a sweep's job, between on_job_start and on_job_end

    @failing_the_command
    def on_run_start(self, config: DictConfig, **kwargs) -> None:
        validate_config(config)  # a ConfigError: the entry point's one line (scripts/entry.py)
        make_output_dir(config.hydra.run.dir, "hydra.run.dir")

    @failing_the_command
    def on_multirun_start(self, config: DictConfig, **kwargs) -> None:
        # A sweeper may open its study in the sweep dir (hparams_search=optuna) before the launcher creates it.
        make_output_dir(config.hydra.sweep.dir, "hydra.sweep.dir")
        for sweep_start in SWEEP_START:  # the extras' (mha_project/extending.py)
            sweep_start(config)

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
        import_tensorflow_quietly()
        import keras

        keras.config.disable_interactive_logging()  # Keras's lines go to absl's logger, at INFO
        self.absl_level = logging.getLogger("absl").level
        logging.getLogger("absl").setLevel(logging.INFO)

    def on_job_end(self, config: DictConfig, job_return, **kwargs) -> None:
        # What on_job_start changed, back as it was: the basic launcher runs the next job in this process.
        if self.job is None:
            return
        for handler in logging.getLogger().handlers:
            handler.removeFilter(self.job)
        import keras

        keras.config.enable_interactive_logging()
        logging.getLogger("absl").setLevel(self.absl_level)
        self.job = None

    @failing_the_command
    def on_multirun_end(self, config: DictConfig, **kwargs) -> None:
        # Each failed job records failure.json and the sweep goes on (training/command.py); a sweep in which
        # no job finished must still end with a non-zero exit status, or scripts and CI read it as success.
        sweep_dir = Path(config.hydra.sweep.dir)
        refused = sweep_dir / REFUSED_JOBS
        if refused.exists():
            lines = refused.read_text(encoding="utf-8").splitlines()
            refused.unlink()  # this sweep's record; the message below carries it
            raise SweepFailed(
                f"{len(lines)} job(s) of the sweep were refused, their run dirs hold other runs "
                f"(first: job {lines[0].replace(chr(9), ': ', 1)}); nothing in them was changed; use a new "
                "hydra.sweep.dir, or add overwrite=true"
            )
        failed = list(sweep_dir.glob("*/failure.json"))
        if failed and not any(sweep_dir.glob("*/metrics.json")):
            raise SweepFailed(f"every job of the sweep failed ({len(failed)} failure.json files in {sweep_dir})")
        where = shlex.quote(str(sweep_dir))
        for next_step in SWEEP_NEXT_STEPS:  # the extras'
            # Printed, not logged: after the jobs, the root logger writes into the last job's train.log.
            print(f"next: {next_step(where)}")
