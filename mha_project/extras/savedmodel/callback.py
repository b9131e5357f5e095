"""The SavedModel extra's Hydra callback (``hydra.callbacks.savedmodel``): when a run finishes, ``export/`` beside its
``model.keras``: the SavedModel that takes raw strings (``export.py``). Cheap to import: the run is loaded only when
it exports."""

from __future__ import annotations

from pathlib import Path

from hydra.experimental.callback import Callback

from mha_project.errors import UserError, disk_full, failing_the_command, message_line
from mha_project.run_dir import METRICS_FILE
from mha_project.training.hydra_callbacks import job_error

EXPORT_DIR = "export"


class Export(Callback):
    @failing_the_command
    def on_job_end(self, config, job_return, **kwargs) -> None:
        run_dir = Path(config.hydra.runtime.output_dir)
        finished = job_error(job_return) is None and (run_dir / METRICS_FILE).is_file()
        if not (finished and config.savedmodel.export) or (run_dir / EXPORT_DIR).exists():
            return  # a run that finished before keeps the export it wrote then
        from mha_project.extras.analysis.runs import load_run
        from mha_project.extras.savedmodel.export import export_inference_model

        run = load_run(run_dir, needs_data=False)
        try:
            export_inference_model(run.model, run.preprocessor, run_dir / EXPORT_DIR, class_names=run.class_names)
        except Exception as err:  # a full disk, no permission: the run is finished, its export is not
            raise UserError(written_later(run_dir / EXPORT_DIR, err)) from None


def written_later(path: Path, err: BaseException) -> str:
    """The one line for a finished run whose file beside model.keras could not be written."""
    why = "no space left on device" if disk_full(err) else f"{type(err).__name__}: {message_line(err)[:160]}"
    return f"{why} while writing {path}; the run itself is finished: free the space and run the same command again"
