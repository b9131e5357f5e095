"""A Hydra sweeper that fills one Optuna study: ask for trials, launch them as jobs, tell their results.

Several workers (the same command in several terminals or on several machines, one ``hydra.sweeper.storage``)
fill the same study: each asks for a trial only while the study holds fewer than ``n_trials`` finished or
running ones. Each job reports its validation accuracy after every epoch to its trial through the storage
(``mha_project.extras.optuna.pruning.OptunaPruning``) and stops when the pruner says so; a pruned trial tells the
study itself and keeps its run directory. A trial whose worker died is marked failed when a worker next starts
(on the same machine: its process is gone; in a database: its heartbeat stopped).
"""

from __future__ import annotations

import logging
import math
import threading
import warnings
from pathlib import Path

from hydra.core.plugins import Plugins
from hydra.plugins.sweeper import Sweeper
from omegaconf import OmegaConf

from mha_project.errors import ConfigError
from mha_project.extras.optuna.studies import (
    HEARTBEAT_SECONDS,
    fail_dead_trials,
    import_optuna,
    make_pruner,
    make_sampler,
    make_storage,
    open_study,
    replaced,
    search_space,
    worker_name,
    write_study_pointer,
)
from mha_project.extras.sweep_report.tables import shown

log = logging.getLogger(__name__)


class OptunaSweeper(Sweeper):
    def __init__(self, **settings) -> None:
        self.settings = settings
        self.config = self.launcher = self.hydra_context = None
        self.job_idx = 0

    def setup(self, *, hydra_context, task_function, config) -> None:
        self.config, self.hydra_context = config, hydra_context
        self.launcher = Plugins.instance().instantiate_launcher(
            hydra_context=hydra_context, task_function=task_function, config=config
        )

    def sweep(self, arguments: list[str]) -> None:
        optuna = import_optuna()
        s = self.settings
        if not (isinstance(s["n_trials"], int) and s["n_trials"] >= 1):
            raise ConfigError(f"hydra.sweeper.n_trials={s['n_trials']} is invalid: must be an integer >= 1")
        space, fixed = search_space({**s["params"]}, arguments)
        kept = replaced({**s["params"]}, arguments)
        if kept:
            log.info(f"hydra.sweeper.params {', '.join(kept)}: not searched, as the command line sets them")
        sampler = make_sampler(s["sampler"], s["seed"])
        if s["pruner"] == "median" and s["n_trials"] <= s["pruner_startup_trials"]:
            log.warning(
                f"hydra.sweeper.pruner=median cannot prune in this sweep: it compares a trial with the median of "
                f"{s['pruner_startup_trials']} finished trials (hydra.sweeper.pruner_startup_trials) and the sweep "
                f"has {s['n_trials']} (hydra.sweeper.n_trials)"
            )
        pruner = make_pruner(s["pruner"], s["pruner_warmup_steps"], s["pruner_startup_trials"])
        storage = make_storage(s["storage"])
        space_record = {k: optuna.distributions.distribution_to_json(d) for k, d in sorted(space.items())}
        study = open_study(storage, s["storage"], s["study_name"], s["direction"], space_record, sampler, pruner)
        sweep_dir = Path(self.config.hydra.sweep.dir)
        sweep_dir.mkdir(parents=True, exist_ok=True)
        OmegaConf.save(self.config, sweep_dir / "multirun.yaml")
        if s["storage"] is not None:
            write_study_pointer(sweep_dir, s["storage"], s["study_name"])
        for number in fail_dead_trials(study, storage):
            log.warning(f"trial {number} was running when its worker died: marked failed")
        state = optuna.trial.TrialState
        failures = 0
        while True:
            counted = study.get_trials(deepcopy=False, states=(state.COMPLETE, state.PRUNED, state.RUNNING))
            wanted = min(s["n_jobs"], s["n_trials"] - len(counted))
            if wanted <= 0:
                break
            trials = []
            for _ in range(wanted):
                with warnings.catch_warnings():  # heartbeats outside Study.optimize: _Heartbeat below keeps them
                    warnings.simplefilter("ignore", UserWarning)
                    trial = study.ask()
                if not trials and self.job_idx == 0 and s["seed"] is not None:
                    # This worker's sampler seed: the seed plus its first trial's number, unique in the study,
                    # so workers started together do not propose the same points (one worker alone: the seed).
                    study.sampler = make_sampler(s["sampler"], s["seed"] + trial.number, design_seed=s["seed"])
                for name, distribution in space.items():
                    _suggest(trial, name, distribution)
                trials.append(trial)
            for trial in trials:
                trial.set_user_attr("worker", worker_name())
                trial.set_user_attr("sweep_dir", str(sweep_dir))
            batch = [[*fixed, *_overrides(trial.params), f"hydra.sweeper.trial={trial.number}"] for trial in trials]
            with _Heartbeat(storage, s["study_name"], trials):
                returns = self.launcher.launch(batch, initial_job_idx=self.job_idx)
            self.job_idx += len(batch)
            for trial, job in zip(trials, returns):
                failures += not self._tell(study, trial, job)
            if failures >= s["n_trials"]:
                raise ConfigError(
                    f"{failures} trials of study {s['study_name']!r} failed (their failure.json says why)"
                )
        self._summarise(study, sweep_dir)

    def _tell(self, study, trial, job) -> bool:
        """Record a finished job's result in its trial, unless the job already did (pruned); True unless failed."""
        optuna = import_optuna()
        state = optuna.trial.TrialState
        recorded = next(t for t in study.get_trials(deepcopy=False) if t.number == trial.number)
        if recorded.state == state.PRUNED:
            log.info(f"trial {trial.number}: pruned after {len(recorded.intermediate_values)} validations")
            return True
        value = None
        try:
            value = float(job.return_value)
        except Exception:  # noqa: BLE001 - a job that raised: Hydra re-raises its error here
            value = None
        if value is None or not math.isfinite(value):
            study.tell(trial, state=state.FAIL)
            log.warning(f"trial {trial.number}: failed")
            return False
        study.tell(trial, value)
        log.info(f"trial {trial.number}: {value:.4f} with {_shown(trial.params)}")
        return True

    def _summarise(self, study, sweep_dir: Path) -> None:
        optuna = import_optuna()
        complete = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
        if not complete:
            return
        best = study.best_trial
        results = {"name": "optuna", "best_trial": best.number, "best_value": best.value, "best_params": best.params}
        OmegaConf.save(OmegaConf.create(results), sweep_dir / "optimization_results.yaml")
        log.info(f"best trial {best.number}: {best.value:.4f} with {_shown(best.params)}")


def _suggest(trial, name: str, distribution) -> None:
    optuna = import_optuna()
    d = optuna.distributions
    if isinstance(distribution, d.CategoricalDistribution):
        trial.suggest_categorical(name, distribution.choices)
    elif isinstance(distribution, d.IntDistribution):
        trial.suggest_int(name, distribution.low, distribution.high, step=distribution.step, log=distribution.log)
    else:
        trial.suggest_float(name, distribution.low, distribution.high, step=distribution.step, log=distribution.log)


def _shown(params: dict) -> str:
    """The trial's values as the log shows them (floats to 4 significant digits; the job trains the exact ones)."""
    return " ".join(f"{key}={shown(value)}" for key, value in params.items())


def _overrides(params: dict) -> list[str]:
    def encode(value):
        return str(value).lower() if isinstance(value, bool) else str(value)

    return [f"{key}={encode(value)}" for key, value in params.items()]


class _Heartbeat:
    """While its trials' jobs run, tell a database storage every HEARTBEAT_SECONDS that their worker lives."""

    def __init__(self, storage, study_name: str, trials):
        optuna = import_optuna()
        self.storage, self.study_name, self.trials = storage, study_name, trials
        self.enabled = isinstance(storage, optuna.storages.RDBStorage)
        self.stop = threading.Event()

    def _beat(self) -> None:
        study_id = self.storage.get_study_id_from_name(self.study_name)
        ids = [self.storage.get_trial_id_from_study_id_trial_number(study_id, t.number) for t in self.trials]
        while not self.stop.is_set():
            for trial_id in ids:
                self.storage.record_heartbeat(trial_id)
            self.stop.wait(HEARTBEAT_SECONDS)

    def __enter__(self):
        if self.enabled:
            self.thread = threading.Thread(target=self._beat, daemon=True)
            self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        if self.enabled:
            self.thread.join()
