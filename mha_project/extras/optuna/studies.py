"""Optuna studies for ``hparams_search=optuna``: storages, pruners, the search space and the trial a training
job reports to. Shared by the sweeper plugin (``hydra_plugins/mha_optuna_sweeper``), the training job's
pruning callback and ``scripts/sweep_report.py``; Optuna is imported only when a study is used (the ``sweep``
extra), and nothing here loads TensorFlow."""

from __future__ import annotations

import functools
import json
import os
import socket
import time
import warnings
from pathlib import Path

from mha_project.errors import ConfigError, message_line

PRUNERS = ("median", "hyperband", "none")
SAMPLERS = ("tpe", "random")
DIRECTIONS = ("maximize", "minimize")
JOURNAL_PREFIX = "journal:///"  # hydra.sweeper.storage=journal:///PATH: Optuna's journal file on PATH
STUDY_FILE = "optuna_study.json"  # in the sweep dir: where its study lives, for sweep_report.py
HEARTBEAT_SECONDS = 30  # a database trial's worker writes this often; silent for GRACE_SECONDS, it is failed
GRACE_SECONDS = 120
SWEEP_EXTRA = 'hparams_search=optuna needs Optuna: pip install -e ".[sweep]"'


def import_optuna():
    try:
        import optuna
    except ImportError:
        raise ConfigError(SWEEP_EXTRA) from None
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # the sweeper logs each trial itself
    return optuna


def make_storage(url: str | None, heartbeat: bool = True):
    """An Optuna storage for ``url``: any SQLAlchemy URL (``sqlite:///…``, ``postgresql://…``, ``mysql://…``)
    as an RDB storage (with heartbeats for the sweeper's trials), ``journal:///PATH`` as a journal file, None
    in memory."""
    optuna = import_optuna()
    if url is None:
        return None
    if url.startswith("journal://") and not url.startswith(JOURNAL_PREFIX):
        absolute = Path(url[len("journal://") :]).resolve()
        raise ConfigError(
            f"hydra.sweeper.storage={url} names no absolute path: a journal URL is journal:/// and the absolute "
            f"path, e.g. journal://{absolute} (a relative path would move with each job's working directory)"
        )
    if url.startswith(JOURNAL_PREFIX):
        from optuna.storages.journal import JournalFileBackend

        path = Path(url[len(JOURNAL_PREFIX) - 1 :])
        check_journal_file(path, url)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            return optuna.storages.JournalStorage(JournalFileBackend(str(path), lock_obj=JournalFlock(path)))
        except OSError as err:  # a parent that is a file, /proc, no permission
            where = f"{err.filename}: " if err.filename else ""
            raise ConfigError(f"hydra.sweeper.storage={url} cannot be used: {where}{err.strerror or err}") from None
    beats = dict(heartbeat_interval=HEARTBEAT_SECONDS, grace_period=GRACE_SECONDS) if heartbeat else {}
    for attempt in range(4):
        try:
            with warnings.catch_warnings():  # heartbeats are "experimental" since Optuna 2.9, and the mechanism
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                return optuna.storages.RDBStorage(url, **beats)
        except Exception as err:  # SQLAlchemy's URL, driver and connection errors come in many types
            # Workers started together on a new database race to create Optuna's tables; the loser's
            # CREATE fails on what the winner made, and a second try finds the tables there.
            if attempt < 3 and _lost_table_race(err):
                time.sleep(0.5 * (attempt + 1))
                continue
            raise ConfigError(f"hydra.sweeper.storage={url} cannot be used: {_storage_problem(url, err)}") from None


def check_journal_file(path: Path, url: str) -> None:
    """Refuse, before anything is written to it, a journal path that is not a file, or a file that is
    neither empty nor an Optuna journal, every line a record (Optuna would append to a user's file, or stop
    on a line it cannot read)."""
    if not path.exists():
        return
    if not path.is_file():
        raise ConfigError(f"hydra.sweeper.storage={url} cannot be used: {path} is not a regular file")
    try:
        with open(path, "rb") as f:
            for number, line in enumerate(f, start=1):
                problem = _not_a_record(line)
                if problem:
                    raise ConfigError(
                        f"hydra.sweeper.storage={url} cannot be used: line {number} of {path} {problem}, so the "
                        "file is no Optuna journal (left as it is); name a new file"
                    )
    except OSError as err:
        raise ConfigError(f"hydra.sweeper.storage={url} cannot be used: {err.strerror or err}") from None


def _not_a_record(line: bytes) -> str | None:
    if not line.strip():
        return "is blank"
    try:
        record = json.loads(line)
    except ValueError:
        record = None
    return None if isinstance(record, dict) and "op_code" in record else "is not a journal record"


class JournalFlock:
    """The journal's lock for Optuna's ``JournalFileBackend(lock_obj=...)``: ``flock`` on ``<journal>.mha-lock``.
    Written here because Optuna's own locks (symlink, open) delete ``<journal>.lock`` when they judge it stale,
    a user's file of that name included; a ``flock`` ends with its process and its file is never deleted."""

    def __init__(self, journal: Path):
        self.path = Path(f"{journal}.mha-lock")
        self.fd, self.pid = None, None

    def acquire(self) -> bool:
        import fcntl

        if self.pid != os.getpid():  # a forked worker opens its own: a shared descriptor shares the lock
            self.pid = os.getpid()
            flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
            try:
                self.fd = os.open(self.path, flags, 0o644)
            except OSError as err:
                raise ConfigError(f"the journal's lock {self.path} cannot be opened: {err.strerror}") from None
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        return True

    def release(self) -> None:
        import fcntl

        fcntl.flock(self.fd, fcntl.LOCK_UN)


def _storage_problem(url: str, err: Exception) -> str:
    """What is wrong with a database URL: the missing driver by name, else the error's first line."""
    if "DB access module" in str(err):
        try:
            from sqlalchemy.engine import make_url

            make_url(url).get_dialect().import_dbapi()
        except ImportError as missing:
            return (
                f"its database driver is not installed ({message_line(missing)}): install it, or name an installed "
                "one in the URL (dialect+driver://…)"
            )
        except Exception:  # noqa: BLE001 - the URL itself is bad: the first line below says so
            pass
    return message_line(err)


def search_space(params: dict, arguments: list[str]):
    """Optuna distributions of ``hydra.sweeper.params`` and of the command line's sweeps (``heads=1,2,4``),
    and the command line's other overrides, which every trial takes as they are. A key on the command line
    replaces the same key of ``hydra.sweeper.params``: ``heads=4`` is kept, not searched (:func:`replaced`)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.core.override_parser.types import ChoiceSweep, IntervalSweep, RangeSweep

    optuna = import_optuna()
    parser = OverridesParser.create()
    declared = parser.parse_overrides([f"{key}={value}" for key, value in params.items()])
    given = parser.parse_overrides(arguments)
    declared = [o for o in declared if o.get_key_element() not in {g.get_key_element() for g in given}]
    # A single value in hydra.sweeper.params (heads=4) is a fixed override: every trial takes it, as the
    # multirun.yaml that records the params says.
    fixed = [o.input_line for o in [*declared, *given] if not o.is_sweep_override()]
    space = {}
    for override in [o for o in [*declared, *given] if o.is_sweep_override()]:
        key = override.get_key_element()
        value = override.value()
        try:
            if isinstance(value, (ChoiceSweep, RangeSweep)):
                space[key] = optuna.distributions.CategoricalDistribution(list(override.sweep_iterator()))
            elif isinstance(value, IntervalSweep):
                log_scale = "log" in value.tags
                if "int" in value.tags or (isinstance(value.start, int) and isinstance(value.end, int)):
                    space[key] = optuna.distributions.IntDistribution(int(value.start), int(value.end), log=log_scale)
                else:
                    space[key] = optuna.distributions.FloatDistribution(value.start, value.end, log=log_scale)
            else:
                raise ValueError("use choice(...), range(...) or interval(...)")
        except ValueError as err:  # Optuna's checks: low <= high, low > 0 on a log scale, no empty choice
            reason = "it has no values" if "one or more elements" in str(err) else message_line(err)
            raise ConfigError(f"{override.input_line} cannot be searched: {reason}") from None
    return space, fixed


def replaced(params: dict, arguments: list[str]) -> list[str]:
    """The keys of ``hydra.sweeper.params`` that the command line sets itself (and that are not searched)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    given = {o.get_key_element() for o in OverridesParser.create().parse_overrides(arguments)}
    return [key for key in params if key in given]


def check_sweep(sweeper_cfg, arguments: list[str]) -> None:
    """What the sweeper checks before its first trial, done before anything loads TensorFlow: the search space
    and the storage (a bad one is one line in a second, not after TensorFlow's start-up)."""
    search_space({**sweeper_cfg.params}, arguments)
    make_storage(sweeper_cfg.storage, heartbeat=False)


def _lost_table_race(err: Exception) -> bool:
    try:
        from sqlalchemy.exc import IntegrityError, OperationalError, ProgrammingError
    except ImportError:
        return False
    # PostgreSQL says so with an integrity or programming error, SQLite with "table ... already exists".
    already = isinstance(err, OperationalError) and "already exists" in str(err)
    return already or isinstance(err, (IntegrityError, ProgrammingError))


def make_pruner(name: str, warmup_steps: int, startup_trials: int, max_resource="auto"):
    """``median`` (a trial below the median of earlier trials at the same epoch stops, after
    ``startup_trials`` finished trials and its own first ``warmup_steps`` validations), ``hyperband`` or
    ``none``."""
    optuna = import_optuna()
    if name == "median":
        return optuna.pruners.MedianPruner(n_startup_trials=startup_trials, n_warmup_steps=warmup_steps)
    if name == "hyperband":
        return optuna.pruners.HyperbandPruner(min_resource=max(1, warmup_steps), max_resource=max_resource)
    if name == "none":
        return optuna.pruners.NopPruner()
    raise ConfigError(f"hydra.sweeper.pruner={name} is invalid: must be one of {', '.join(PRUNERS)}")


# TPE's own start: this many trials before its model takes over; here they are the covering design below.
STARTUP_TRIALS = 10


def make_sampler(name: str, seed, design_seed=None):
    """``tpe`` (its first STARTUP_TRIALS trials a covering design seeded by ``design_seed``, then TPE seeded by
    ``seed``) or ``random``."""
    optuna = import_optuna()
    if name == "tpe":
        return _covering_tpe_class()(seed=seed, design_seed=seed if design_seed is None else design_seed)
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    raise ConfigError(f"hydra.sweeper.sampler={name} is invalid: must be one of {', '.join(SAMPLERS)}")


@functools.cache
def _covering_tpe_class():
    """The TPE sampler with a covering start; defined on first use, as Optuna is imported only then."""
    optuna = import_optuna()

    class CoveringTPESampler(optuna.samplers.TPESampler):
        """TPE whose first trials form a seeded Latin-hypercube design: every choice of a categorical
        parameter once in each round of its choices, each numeric range cut into STARTUP_TRIALS strata
        drawn once each. TPE's own start draws every trial independently, and can draw one key_dim in
        each of the first four trials of a sweep."""

        def __init__(self, seed=None, design_seed=None):
            super().__init__(seed=seed, n_startup_trials=STARTUP_TRIALS)
            self.design_seed = 0 if design_seed is None else int(design_seed)

        def sample_independent(self, study, trial, param_name, param_distribution):
            if trial.number >= STARTUP_TRIALS:
                return super().sample_independent(study, trial, param_name, param_distribution)
            return covering_value(self.design_seed, param_name, trial.number, param_distribution)

    return CoveringTPESampler


def covering_value(seed: int, name: str, number: int, distribution):
    """Trial ``number``'s value of parameter ``name`` in the covering design (see ``CoveringTPESampler``)."""
    import zlib

    import numpy as np

    optuna = import_optuna()
    key = zlib.crc32(name.encode("utf-8"))
    if isinstance(distribution, optuna.distributions.CategoricalDistribution):
        choices = distribution.choices
        order = np.random.default_rng([seed, key, number // len(choices)]).permutation(len(choices))
        return choices[int(order[number % len(choices)])]
    stratum = np.random.default_rng([seed, key]).permutation(STARTUP_TRIALS)[number]
    fraction = (stratum + np.random.default_rng([seed, key, number]).random()) / STARTUP_TRIALS
    low, high = float(distribution.low), float(distribution.high)
    if distribution.log:
        value = float(np.exp(np.log(low) + fraction * (np.log(high) - np.log(low))))
    else:
        value = low + fraction * (high - low)
    step = distribution.step
    if step is not None:
        value = low + round((value - low) / step) * step
    value = min(max(value, low), high)
    if isinstance(distribution, optuna.distributions.IntDistribution):
        return int(round(value))  # low and high are whole: a value between them rounds between them
    return float(value)


def open_study(storage, storage_url, study_name: str, direction: str, search_space: dict, sampler=None, pruner=None):
    """The study named ``study_name`` in ``storage`` (:func:`make_storage` of ``storage_url``), created when it
    is new. A study of that name made with another direction or search space is refused in one line: its
    trials would not be comparable."""
    optuna = import_optuna()
    if direction not in DIRECTIONS:
        raise ConfigError(f"hydra.sweeper.direction={direction} is invalid: must be one of {', '.join(DIRECTIONS)}")
    try:
        study = optuna.create_study(
            storage=storage,
            study_name=study_name,
            direction=direction,
            sampler=sampler,
            pruner=pruner,
            load_if_exists=True,
        )
    except Exception as err:  # an unreachable server, a locked or unreadable file
        raise ConfigError(f"hydra.sweeper.storage={storage_url} cannot be used: {message_line(err)}") from None
    if study.direction.name.lower() != direction:
        raise ConfigError(
            f"study {study_name!r} in {storage_url} exists with direction {study.direction.name.lower()}, not "
            f"{direction}; give another hydra.sweeper.study_name (its trials are kept)"
        )
    recorded = study.user_attrs.get("search_space")
    if recorded is None:
        study.set_user_attr("search_space", search_space)
    elif recorded != search_space:
        changed = sorted(
            set(recorded) ^ set(search_space) | {k for k in recorded if recorded[k] != search_space.get(k)}
        )
        raise ConfigError(
            f"study {study_name!r} in {storage_url} exists with another search space ({changed[0]}: "
            f"{recorded.get(changed[0])} -> {search_space.get(changed[0])}); give another hydra.sweeper.study_name "
            "(its trials are kept)"
        )
    return study


def worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def fail_dead_trials(study, storage) -> list[int]:
    """Mark failed the running trials whose worker is gone: on this machine, a worker process that no longer
    exists; in a database, also a trial whose heartbeat stopped (``fail_stale_trials``). Returns their numbers."""
    optuna = import_optuna()
    state = optuna.trial.TrialState
    if isinstance(storage, optuna.storages.RDBStorage):  # heartbeats exist for database storages only
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            optuna.storages.fail_stale_trials(study)
    failed = []
    host = socket.gethostname()
    for trial in study.get_trials(deepcopy=False, states=(state.RUNNING,)):
        owner_host, _, pid = str(trial.user_attrs.get("worker", "")).rpartition(":")
        if owner_host == host and pid.isdigit() and not _alive(int(pid)):
            study.tell(trial.number, state=state.FAIL)
            failed.append(trial.number)
    return failed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def write_study_pointer(sweep_dir: Path, storage_url: str, study_name: str) -> None:
    from mha_project.atomic import write_json_atomic

    write_json_atomic(Path(sweep_dir) / STUDY_FILE, {"storage": storage_url, "study_name": study_name})


def read_study_pointer(sweep_dir: Path) -> dict | None:
    path = Path(sweep_dir) / STUDY_FILE
    return json.loads(path.read_text()) if path.is_file() else None


def job_trial(sweeper):
    """``(study, trial)`` of a job the sweeper started: the sweeper sets ``hydra.sweeper.trial`` in each job's
    overrides; the job opens the study through its storage, so a job in another process or on another
    machine reports to the same trial."""
    optuna = import_optuna()
    pruner = make_pruner(sweeper.pruner, sweeper.pruner_warmup_steps, sweeper.pruner_startup_trials)
    storage = make_storage(sweeper.storage, heartbeat=False)  # the sweeper's process keeps the trial's heartbeat
    study = optuna.load_study(study_name=sweeper.study_name, storage=storage, pruner=pruner)
    trial_id = storage.get_trial_id_from_study_id_trial_number(
        storage.get_study_id_from_name(sweeper.study_name), int(sweeper.trial)
    )
    return study, optuna.trial.Trial(study, trial_id)
