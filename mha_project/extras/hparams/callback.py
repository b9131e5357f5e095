"""The HParams extra's Hydra callback (``hydra.callbacks.hparams``): a sweep's one experiment config when it starts
(its swept keys marked), and each run's session end (success with the final metrics, or failure once the run's
session started). Cheap to import: TensorFlow loads only when a record is written."""

from __future__ import annotations

import json
from pathlib import Path

from hydra.experimental.callback import Callback

from mha_project.errors import RunDirRefused, failing_the_command
from mha_project.quiet import import_tensorflow_quietly
from mha_project.run_dir import METRICS_FILE
from mha_project.training.hydra_callbacks import job_error


class HParamsRecords(Callback):
    def __init__(self) -> None:
        self.finished_before = False  # this job's run had finished before it started (nothing to record)

    @failing_the_command
    def on_multirun_start(self, config, **kwargs) -> None:
        import_tensorflow_quietly()  # it writes with TensorFlow, whose start-up lines stay out of the output
        from mha_project.extras.hparams.dashboard import sweep_params_of, swept_domains, write_experiment

        write_experiment(Path(config.hydra.sweep.dir), config, swept_domains(config, sweep_params_of(config)))

    def on_job_start(self, config, **kwargs) -> None:
        self.finished_before = (Path(config.hydra.runtime.output_dir) / METRICS_FILE).is_file()

    def on_job_end(self, config, job_return, **kwargs) -> None:
        run_dir = Path(config.hydra.runtime.output_dir)
        error = job_error(job_return)
        failed = error is not None
        if isinstance(error, RunDirRefused) or self.finished_before:
            return  # another run's directory, or a finished one: its record is not this job's to add to
        if not (run_dir / ".hydra" / "config.yaml").is_file() or not (run_dir / "tensorboard").is_dir():
            return  # no session started: the run stopped before its fit
        from mha_project.extras.hparams.dashboard import write_session_end

        metrics = None if failed else json.loads((run_dir / METRICS_FILE).read_text())
        write_session_end(run_dir / "tensorboard", success=not failed, metrics=metrics)
