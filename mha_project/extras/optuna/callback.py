"""The Optuna extra's Hydra callback: the search space and the storage, checked before the sweeper opens its
study or starts a job (``configs/hparams_search/optuna.yaml`` adds it)."""

from __future__ import annotations

from hydra.experimental.callback import Callback

from mha_project.errors import failing_the_command


class SweepChecks(Callback):
    """The search space and the storage, checked before the sweeper opens its study or starts a job."""

    @failing_the_command
    def on_multirun_start(self, config, **kwargs) -> None:
        from mha_project.extras.optuna.studies import check_sweep

        check_sweep(config.hydra.sweeper, list(config.hydra.overrides.task))  # a ConfigError: one line
