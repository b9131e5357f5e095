"""hparams_search=optuna: the project's sweeper on Optuna >= 4 (hydra_plugins/mha_optuna_sweeper), pruning,
studies shared by several workers (SQLite, PostgreSQL, a journal file), a killed sweep, the report."""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from conftest import QUIET, ROOT, TINY, free_port, run_script

optuna = pytest.importorskip("optuna")

STUDY = "heads_key_dim_dropout"
# Tiny trials, two validations each, pruned from the second trial on when below the median.
FAST = [*TINY, *QUIET, "epochs=2", "hydra.sweeper.pruner_startup_trials=1", "hydra.sweeper.pruner_warmup_steps=0"]


def optuna_sweep(sweep_dir: Path, *overrides: str, fresh_process=False, **popen):
    args = ["-m", "hparams_search=optuna", *FAST, f"hydra.sweep.dir={sweep_dir}", *overrides]
    if popen:
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
        return subprocess.Popen([sys.executable, str(ROOT / "scripts" / "train.py"), *args], cwd=ROOT, env=env, **popen)
    return run_script("train.py", *args, fresh_process=fresh_process)


def trials_of(storage: str, name: str = STUDY):
    return optuna.load_study(study_name=name, storage=storage).get_trials(deepcopy=False)


@pytest.fixture(scope="module")
def finished_sweep(tmp_path_factory):
    """Three trials in the sweep dir's SQLite study, no pruner, two fixed overrides on the command line."""
    path = tmp_path_factory.mktemp("optuna") / "s"
    result = optuna_sweep(
        path, "hydra.sweeper.n_trials=3", "hydra.sweeper.pruner=none", "data.vocab_size=300", "seq_len=24"
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return path, result


@pytest.mark.slow
def test_a_sweep_fills_its_study_and_each_trial_is_its_own_run(finished_sweep):
    path, result = finished_sweep
    trials = trials_of(f"sqlite:///{path}/optuna.db")
    assert [t.state.name for t in trials] == ["COMPLETE"] * 3
    for trial in trials:
        run = path / f"trial_{trial.number}"
        metrics = json.loads((run / "metrics.json").read_text())
        assert trial.value == pytest.approx(metrics["best_val_accuracy"]) and metrics["pruned_at_epoch"] is None
        assert {k: metrics["hparams"][k] for k in ("heads", "key_dim")} == {
            k: trial.params[k] for k in ("heads", "key_dim")
        }
        assert metrics["hparams"]["dropout"] == pytest.approx(trial.params["dropout"])
        # Each epoch's validation accuracy reached the trial through the study's storage.
        assert sorted(trial.intermediate_values) == [0, 1]
        config = (run / ".hydra" / "config.yaml").read_text()
        assert "vocab_size: 300" in config and "seq_len: 24" in config  # the fixed overrides reach every trial
    assert f"next: python scripts/sweep_report.py {path}" in result.stdout


@pytest.mark.slow
def test_the_report_reads_the_study_states_values_and_importances(finished_sweep):
    path, _ = finished_sweep
    result = run_script("sweep_report.py", str(path))
    assert result.returncode == 0, result.stderr[-2000:]
    report = (path / "report.md").read_text()
    trials = trials_of(f"sqlite:///{path}/optuna.db")
    assert f"## Optuna study `{STUDY}` (3 complete)" in report
    best = max(trials, key=lambda t: t.value)
    assert f"Best: trial {best.number}, {best.value:.4f}" in report
    assert "Importances: not computed from 3 complete trial(s)" in report  # too few to rank anything
    assert "| parameter | importance |" not in report and not (path / "importances.png").exists()
    rows = (path / "study.csv").read_text().splitlines()
    assert rows[0] == "trial,state,value,validations,dropout,heads,key_dim,run_dir" and len(rows) == 4


def test_a_value_given_on_the_command_line_is_kept_and_not_searched():
    from mha_project.extras.optuna.studies import replaced, search_space

    params = {"heads": "choice(1,2,4)", "dropout": "interval(0.0,0.5)"}
    space, fixed = search_space(params, ["heads=4", "key_dim=16,32"])
    assert set(space) == {"dropout", "key_dim"} and fixed == ["heads=4"]
    assert replaced(params, ["heads=4", "key_dim=16,32"]) == ["heads"]
    space, fixed = search_space(params, ["heads=2,8"])  # a sweep on the command line replaces the declared one
    assert space["heads"].choices == (2, 8) and fixed == []


def test_the_first_trials_of_a_seeded_tpe_sweep_cover_every_choice_and_every_stratum():
    from mha_project.extras.optuna.studies import STARTUP_TRIALS, make_sampler

    study = optuna.create_study(direction="maximize", sampler=make_sampler("tpe", 0))
    drawn = []
    for _ in range(STARTUP_TRIALS):
        trial = study.ask()
        values = (
            trial.suggest_categorical("heads", [1, 2, 4, 8]),
            trial.suggest_categorical("key_dim", [16, 32, 64]),
            trial.suggest_float("dropout", 0.0, 0.5),
        )
        drawn.append(values)
        study.tell(trial, 0.5)
    for start in range(0, 8, 4):
        assert sorted(h for h, _, _ in drawn[start : start + 4]) == [1, 2, 4, 8]  # each head count once a round
    for start in range(0, 9, 3):
        assert sorted(k for _, k, _ in drawn[start : start + 3]) == [16, 32, 64]
    strata = sorted(int(d / 0.5 * STARTUP_TRIALS) for _, _, d in drawn)
    assert strata == list(range(STARTUP_TRIALS))  # one dropout in each tenth of the range
    again = optuna.create_study(direction="maximize", sampler=make_sampler("tpe", 0))
    trial = again.ask()
    assert trial.suggest_categorical("heads", [1, 2, 4, 8]) == drawn[0][0]  # seeded: the same design


@pytest.mark.slow
def test_importances_come_from_enough_trials_and_name_a_parameter_that_never_varied(tmp_path):
    from mha_project.extras.optuna.report_section import study_report
    from mha_project.extras.optuna.studies import write_study_pointer

    storage = f"sqlite:///{tmp_path}/optuna.db"
    study = optuna.create_study(storage=storage, study_name=STUDY, direction="maximize")
    dists = {
        "heads": optuna.distributions.CategoricalDistribution([1, 2, 4, 8]),
        "key_dim": optuna.distributions.CategoricalDistribution([16, 64]),
        "dropout": optuna.distributions.FloatDistribution(0.0, 0.5),
    }
    for k in range(12):
        params = {"heads": [1, 2, 4, 8][k % 4], "key_dim": 64, "dropout": 0.3005575058716044 + k / 100}
        study.add_trial(optuna.trial.create_trial(params=params, distributions=dists, value=0.7 + 0.01 * (k % 4)))
    write_study_pointer(tmp_path, storage, STUDY)
    report = study_report(tmp_path)
    assert report["importances"] and "key_dim never varied among the complete trials" in report["markdown"]
    assert "0.3006" in report["markdown"] and "0.3005575058716044" not in report["markdown"]  # values rounded


@pytest.mark.slow
def test_a_trial_below_the_median_is_pruned_keeps_its_run_and_the_sweep_goes_on(tmp_path):
    path = tmp_path / "s"
    storage = f"sqlite:///{path}/optuna.db"
    path.mkdir()
    # A finished trial that was 0 after one validation and 1.0 after two: the median pruner lets a new trial
    # pass its first validation and prunes it at its second, where every real trial is below 1.0.
    study = optuna.create_study(study_name=STUDY, storage=storage, direction="maximize")
    space = {
        "heads": optuna.distributions.CategoricalDistribution([1, 2, 4, 8]),
        "key_dim": optuna.distributions.CategoricalDistribution([8, 16, 32, 64]),
        "dropout": optuna.distributions.FloatDistribution(0.0, 0.5),
    }
    study.add_trial(
        optuna.trial.create_trial(
            params={"heads": 2, "key_dim": 8, "dropout": 0.1},
            distributions=space,
            value=1.0,
            intermediate_values={0: 0.0, 1: 1.0},
        )
    )
    result = optuna_sweep(path, "hydra.sweeper.n_trials=3", "epochs=3")
    assert result.returncode == 0, result.stderr[-3000:]
    trials = trials_of(storage)
    assert [t.state.name for t in trials] == ["COMPLETE", "PRUNED", "PRUNED"]
    for trial in trials[1:]:
        run = path / f"trial_{trial.number}"
        metrics = json.loads((run / "metrics.json").read_text())  # the pruned run tested and saved its best epoch
        assert (
            metrics["pruned_at_epoch"] == 2
            and metrics["epochs_run"] == 2
            and sorted(trial.intermediate_values) == [0, 1]
        )
        assert (run / "model.keras").is_file()
    report = run_script("sweep_report.py", str(path))
    assert "(1 complete, 2 pruned)" in (path / "report.md").read_text(), report.stderr[-2000:]
    assert "| pruned | pruned after epoch 2 |" in (path / "report.md").read_text()


def _two_workers(tmp_path, storage: str, n_trials: int = 4):
    """The same command in two terminals: two processes, one storage, each its own sweep dir."""
    workers = [
        optuna_sweep(
            tmp_path / f"worker{k}",
            f"hydra.sweeper.storage={storage}",
            f"hydra.sweeper.n_trials={n_trials}",
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for k in (0, 1)
    ]
    outputs = [w.communicate(timeout=600)[0] for w in workers]
    assert [w.returncode for w in workers] == [0, 0], "\n".join(o[-2000:] for o in outputs)
    for output in outputs:  # TensorFlow's start-up lines are kept out of a sweep's output, as out of a run's
        assert "failed call to cuInit" not in output and "oneDNN custom operations" not in output, output[:2000]
    trials = trials_of(storage)
    numbers = [t.number for t in trials]
    assert sorted(numbers) == list(range(len(trials))) and len(trials) >= n_trials  # none duplicated, none lost
    finished = [t for t in trials if t.state.name in ("COMPLETE", "PRUNED")]
    assert len(finished) == len(trials), [(t.number, t.state.name) for t in trials]
    by_worker = {}
    for trial in trials:  # every trial ran in its worker's own sweep dir
        run = Path(trial.user_attrs["sweep_dir"]) / f"trial_{trial.number}"
        assert (run / "metrics.json").is_file(), run
        by_worker.setdefault(run.parent.name, []).append(trial.number)
    assert set(by_worker) == {"worker0", "worker1"}, by_worker  # both took part
    points = [tuple(sorted(t.params.items())) for t in trials]
    assert len(set(points)) == len(points), points  # workers started together propose different points
    return trials


@pytest.fixture
def postgres_url():
    """A throw-away PostgreSQL server (Debian's postgresql package) on a free port; as user postgres when
    this is root (the server refuses to run as root)."""
    binaries = sorted(Path("/usr/lib/postgresql").glob("*/bin"))
    root = os.geteuid() == 0
    if not binaries or (root and shutil.which("runuser") is None):
        if os.environ.get("MHA_REQUIRE_POSTGRES"):
            pytest.fail("MHA_REQUIRE_POSTGRES=1 but PostgreSQL is not installed")
        pytest.skip("PostgreSQL is not installed (apt-get install -y postgresql; .ci/run does)")
    try:
        import psycopg  # noqa: F401  (the driver SQLAlchemy picks for postgresql://; the sweep extra installs it)
    except ImportError:
        if os.environ.get("MHA_REQUIRE_POSTGRES"):
            pytest.fail("MHA_REQUIRE_POSTGRES=1 but psycopg is not installed (the sweep extra)")
        pytest.skip("psycopg is not installed: pip install -e '.[sweep]'")
    bin_dir = binaries[-1]
    base = Path(tempfile.mkdtemp(prefix="mha_pg_"))  # not under pytest's tmp_path, which only root may enter
    os.chmod(base, 0o755)
    data = base / "pgdata"
    data.mkdir()
    if root:
        shutil.chown(data, "postgres")
    port = free_port()

    def server(*cmd):
        prefix = ["runuser", "-u", "postgres", "--"] if root else []
        return subprocess.run([*prefix, *map(str, cmd)], capture_output=True, text=True, timeout=120)

    init = server(bin_dir / "initdb", "-D", data, "-A", "trust", "-U", "postgres")
    assert init.returncode == 0, init.stderr
    options = f"-p {port} -k {data} -c listen_addresses=127.0.0.1"
    start = server(bin_dir / "pg_ctl", "-D", data, "-o", options, "-w", "-l", data / "log", "start")
    assert start.returncode == 0, start.stderr + (data / "log").read_text()
    try:
        yield f"postgresql://postgres@127.0.0.1:{port}/postgres"
    finally:
        server(bin_dir / "pg_ctl", "-D", data, "-m", "immediate", "stop")
        shutil.rmtree(base, ignore_errors=True)


@pytest.mark.slow
@pytest.mark.subprocess
def test_two_workers_fill_one_postgresql_study(tmp_path, postgres_url):
    # Fresh processes and a real server: two sweeper processes sharing one study is the behaviour under test, as
    # workers on several machines share a database. (Processes sharing a SQLite study: the joblib launcher's jobs
    # below; two workers creating its tables at once: the race test at the end.)
    _two_workers(tmp_path, postgres_url)


@pytest.mark.slow
def test_a_journal_file_holds_a_study(tmp_path):
    storage = f"journal:///{tmp_path / 'study.log'}"
    mine = tmp_path / "study.log.lock"  # a user's file where Optuna's own lock would be (and be deleted)
    mine.write_text("my file\n")
    result = optuna_sweep(tmp_path / "s", f"hydra.sweeper.storage={storage}", "hydra.sweeper.n_trials=2")
    assert result.returncode == 0, result.stderr[-3000:]
    journal = optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(tmp_path / "study.log")))
    assert len(optuna.load_study(study_name=STUDY, storage=journal).trials) == 2
    assert mine.read_text() == "my file\n"


@pytest.mark.slow
def test_bad_storages_and_search_spaces_are_one_line_and_leave_a_users_file_as_it_was(tmp_path):
    notes = tmp_path / "notes.log"
    notes.write_text("my notes\n")
    blank = tmp_path / "blank.log"
    blank.write_text('\n{"op_code": 0, "worker_id": "w", "study_name": "s", "directions": [1]}\n')
    cases = [
        (
            f"hydra.sweeper.storage=journal:///{notes}",
            "notes.log is not a journal record, so the file is no Optuna journal (left",
        ),
        (f"hydra.sweeper.storage=journal:///{blank}", "cannot be used: line 1 of /"),
        ("hydra.sweeper.storage=journal://study.log", "names no absolute path: a journal URL is journal:/// and the"),
        (f"hydra.sweeper.storage=journal:///{notes}/study.log", "cannot be used: "),
        ("hydra.sweeper.storage=journal:///proc/study.log", "cannot be used: /proc/study.log: "),
        ("hydra.sweeper.storage=journal:///", "cannot be used: / is not a regular file"),
        ("hydra.sweeper.storage=mysql://me@127.0.0.1:1/db", "its database driver is not installed (No module named"),
        ("dropout=interval(0.9,0.1)", "dropout=interval(0.9,0.1) cannot be searched: `low <= high` must hold"),
        ("dropout=tag(log,interval(0.0,0.5))", "cannot be searched: `low > 0` must hold for `log=True`"),
        ("heads=range(5,1)", "heads=range(5,1) cannot be searched: it has no values"),
    ]
    for override, message in cases:
        result = optuna_sweep(tmp_path / "s", override)
        lines = result.stderr.strip().splitlines()
        assert result.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: "), (override, lines)
        assert message in lines[0], (override, lines[0])
        assert "blank.log" not in override or "blank.log is blank, so the file is no Optuna journal" in lines[0]
    assert notes.read_text() == "my notes\n" and blank.read_text().startswith("\n{")


@pytest.mark.slow
def test_a_single_value_in_the_search_space_is_what_every_trial_trains(tmp_path):
    path = tmp_path / "s"
    result = optuna_sweep(
        path, "hydra.sweeper.n_trials=1", "hydra.sweeper.params.heads=4", "hydra.sweeper.pruner_startup_trials=1"
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "hydra.sweeper.pruner=median cannot prune in this sweep" in result.stdout + result.stderr
    jobs = sorted(path.glob("*/metrics.json"))
    assert len(jobs) == 1 and json.loads(jobs[0].read_text())["hparams"]["heads"] == 4
    assert all("heads" not in t.params for t in trials_of(f"sqlite:///{path}/optuna.db"))


@pytest.mark.slow
@pytest.mark.subprocess
def test_a_killed_sweep_continues_and_its_running_trial_is_marked_failed(tmp_path):
    # A fresh process: it is killed with SIGKILL mid-trial.
    path = tmp_path / "s"
    worker = optuna_sweep(
        path, "hydra.sweeper.n_trials=2", "epochs=3", stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        deadline = time.time() + 300
        while time.time() < deadline and not (path / "trial_1" / "history.csv").exists():
            assert worker.poll() is None, "the sweep ended before it could be killed"
            time.sleep(0.1)
        worker.send_signal(signal.SIGKILL)
        worker.wait()
    finally:
        if worker.poll() is None:
            worker.kill()
    storage = f"sqlite:///{path}/optuna.db"
    assert [t.state.name for t in trials_of(storage)][:2] in (["COMPLETE", "RUNNING"], ["PRUNED", "RUNNING"])
    result = optuna_sweep(path, "hydra.sweeper.n_trials=2", "epochs=3")  # the same command again
    assert result.returncode == 0, result.stderr[-3000:]
    trials = trials_of(storage)
    assert trials[1].state.name == "FAIL"  # marked failed, not lost, not counted
    assert sum(t.state.name in ("COMPLETE", "PRUNED") for t in trials) == 2 and trials[0].state.name != "FAIL"
    assert "trial 1 was running when its worker died: marked failed" in result.stderr + result.stdout


@pytest.mark.slow
def test_bad_study_settings_are_one_line_and_the_study_keeps_its_trials(finished_sweep, tmp_path):
    path, _ = finished_sweep
    storage = f"sqlite:///{path}/optuna.db"
    before = [(t.number, t.state.name) for t in trials_of(storage)]
    cases = [
        (
            "hydra.sweeper.pruner=sometimes",
            "hydra.sweeper.pruner=sometimes is invalid: must be one of median, hyperband, none",
        ),
        ("hydra.sweeper.sampler=grid", "hydra.sweeper.sampler=grid is invalid: must be one of tpe, random"),
        (
            "hydra.sweeper.direction=minimize",
            f"study '{STUDY}' in {storage} exists with direction maximize, not minimize",
        ),
        (
            "hydra.sweeper.params.heads='choice(1,3)'",
            f"study '{STUDY}' in {storage} exists with another search space (heads:",
        ),
        (
            "hydra.sweeper.storage=postgresql://nobody@127.0.0.1:1/none",
            "hydra.sweeper.storage=postgresql://nobody@127.0.0.1:1/none cannot be used",
        ),
        ("hydra.sweeper.storage=nonsense://x", "hydra.sweeper.storage=nonsense://x cannot be used"),
    ]
    for override, message in cases:
        result = run_script(
            "train.py",
            "-m",
            "hparams_search=optuna",
            *FAST,
            f"hydra.sweep.dir={path}",
            f"hydra.sweeper.storage={storage}",
            override,
        )
        lines = result.stderr.strip().splitlines()
        assert result.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: "), (
            override,
            result.stderr[-2000:],
        )
        assert message in lines[0], (override, lines[0])
    assert [(t.number, t.state.name) for t in trials_of(storage)] == before  # nothing of the study lost


@pytest.mark.slow
def test_jobs_of_the_joblib_launcher_report_to_their_trials_from_their_own_processes(tmp_path):
    pytest.importorskip("hydra_plugins.hydra_joblib_launcher")
    path = tmp_path / "s"
    result = optuna_sweep(path, "hydra/launcher=joblib", "hydra.sweeper.n_jobs=2", "hydra.sweeper.n_trials=2")
    assert result.returncode == 0, result.stderr[-3000:]
    trials = trials_of(f"sqlite:///{path}/optuna.db")
    assert [t.state.name for t in trials] == ["COMPLETE", "COMPLETE"]
    assert all(sorted(t.intermediate_values) == [0, 1] for t in trials)  # reported through the storage


def test_a_sweeper_or_launcher_of_the_sweep_extra_that_is_missing_names_the_extra(tmp_path, monkeypatch):
    import importlib.util

    find_spec = importlib.util.find_spec
    missing = ("optuna", "hydra_plugins.hydra_joblib_launcher")
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name in missing else find_spec(name, *a))
    for choice, module in (
        ("hparams_search=optuna", "optuna"),
        ("hydra/launcher=joblib", "hydra_plugins.hydra_joblib_launcher"),
    ):
        result = run_script("train.py", "-m", choice, *TINY, f"hydra.sweep.dir={tmp_path / 's'}")
        assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr[-2000:]
        assert f"error: {choice} needs a package that is not installed ({module})" in result.stderr
        assert 'pip install -e ".[sweep]"' in result.stderr and not (tmp_path / "s").exists()


def test_a_worker_that_loses_the_race_to_create_the_tables_tries_again_and_other_errors_do_not():
    from sqlalchemy.exc import OperationalError

    from mha_project.extras.optuna.studies import _lost_table_race

    def sqlite_error(message):
        return OperationalError("CREATE TABLE studies (...)", {}, Exception(message))

    assert _lost_table_race(sqlite_error("table studies already exists"))  # SQLite's word for the lost race
    assert not _lost_table_race(sqlite_error("unable to open database file"))
