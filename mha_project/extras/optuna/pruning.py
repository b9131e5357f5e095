"""The Keras callback of a job of ``hparams_search=optuna``: it reports to the job's trial and stops it when
the study's pruner says so."""

from __future__ import annotations

import keras


class OptunaPruning(keras.callbacks.Callback):
    """Report ``monitor`` to the job's trial after every validation and stop training when the study's pruner
    says so (Optuna's own Keras integration lives in a separate package, optuna-integration, for Keras 2's
    ``tf.keras``). A pruned trial is told to the study here; the run then tests and saves its best epoch as
    any run that stopped early, and records ``pruned_at_epoch`` (``run_results``, in passes over the data)."""

    def __init__(self, study, trial, monitor: str = "val_accuracy", validations_per_epoch: int = 1):
        super().__init__()
        self.study, self.trial, self.monitor = study, trial, monitor
        self.validations_per_epoch = validations_per_epoch
        self.run_results = {"pruned_at_epoch": None}

    def on_epoch_end(self, epoch, logs=None):
        value = (logs or {}).get(self.monitor)
        if value is None:
            return
        self.trial.report(float(value), step=epoch)
        if self.trial.should_prune():
            import optuna

            passes = (epoch + 1) / self.validations_per_epoch
            self.run_results["pruned_at_epoch"] = int(passes) if passes.is_integer() else round(passes, 3)
            self.study.tell(self.trial.number, state=optuna.trial.TrialState.PRUNED)
            self.model.stop_training = True


def trial_pruning(monitor: str = "val_accuracy", validations_per_epoch: int = 1) -> OptunaPruning:
    """The pruning callback of a job the Optuna sweeper started: its ``hydra.sweeper`` node names the job's trial
    and the study's storage."""
    from hydra.core.hydra_config import HydraConfig

    from mha_project.extras.optuna.studies import job_trial

    study, trial = job_trial(HydraConfig.get().sweeper)
    return OptunaPruning(study, trial, monitor=monitor, validations_per_epoch=validations_per_epoch)
