"""``hparams_search=optuna``: Optuna studies (``studies.py``) for the sweeper plugin
(``hydra_plugins/mha_optuna_sweeper``), the job's pruning callback (``pruning.py``, registered with the core
here) and the sweep's checks before any job starts (``SweepChecks``, a Hydra callback that
``configs/hparams_search/optuna.yaml`` adds)."""

from __future__ import annotations

from hydra.experimental.callback import Callback

from mha_project.errors import failing_the_command
from mha_project.extending import SWEEP_REPORT_SECTIONS, fit_callbacks


@fit_callbacks
def trial_pruning(cfg, job) -> list:
    """The pruning callback, in a job the Optuna sweeper started (it sets ``hydra.sweeper.trial``)."""
    sweeper = job.hydra.sweeper if job.hydra is not None else {}
    if sweeper.get("trial") is None or sweeper.get("storage") is None:
        return []
    from mha_project.extras.optuna.pruning import OptunaPruning
    from mha_project.extras.optuna.studies import job_trial

    study, trial = job_trial(sweeper)
    return [OptunaPruning(study, trial, validations_per_epoch=cfg.trainer.validations_per_epoch)]


def study_section(sweep_dir):
    from mha_project.extras.optuna.report_section import study_report

    return study_report(sweep_dir)


SWEEP_REPORT_SECTIONS.append(study_section)


class SweepChecks(Callback):
    """The search space and the storage, checked before the sweeper opens its study or starts a job."""

    @failing_the_command
    def on_multirun_start(self, config, **kwargs) -> None:
        from mha_project.extras.optuna.studies import check_sweep

        check_sweep(config.hydra.sweeper, list(config.hydra.overrides.task))  # a ConfigError: one line
