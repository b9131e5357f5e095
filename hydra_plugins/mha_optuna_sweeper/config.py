"""``hydra/sweeper=mha_optuna``: the settings of :class:`~.sweeper.OptunaSweeper` (``hparams_search=optuna``,
the optuna extra's ``configs/hparams_search/optuna.yaml``, sets them)."""

from dataclasses import dataclass, field
from typing import Any, Optional

from hydra.core.config_store import ConfigStore


@dataclass
class OptunaSweeperConf:
    _target_: str = "hydra_plugins.mha_optuna_sweeper.sweeper.OptunaSweeper"
    direction: str = "maximize"  # maximize | minimize: what the study does with each job's return value
    study_name: str = "mha"
    # Any SQLAlchemy URL (sqlite:///study.db, postgresql://host/db), journal:///PATH (a journal file on a
    # shared file system), or null (in memory: the study ends with the sweep).
    storage: Optional[str] = None
    n_trials: int = 20  # finished trials (complete or pruned) the study should hold, across every worker
    n_jobs: int = 1  # trials asked for and launched together (the launcher may run them in parallel)
    sampler: str = "tpe"  # tpe | random
    seed: Optional[int] = None  # the sampler's seed
    pruner: str = "median"  # median | hyperband | none
    pruner_warmup_steps: int = 1  # validations of a trial before it may be pruned
    pruner_startup_trials: int = 5  # finished trials before the median pruner prunes any
    params: dict[str, Any] = field(default_factory=dict)  # key: Hydra sweep syntax (choice, interval, range)
    trial: Optional[int] = None  # set by the sweeper in each job: the trial number that job reports to


ConfigStore.instance().store(group="hydra/sweeper", name="mha_optuna", node=OptunaSweeperConf, provider="mha_project")
