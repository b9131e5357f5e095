"""The run record extra: a run directory's identity, its lock, honest resume and overwrite
(mha_project/extras/run_record/)."""

import csv
import json
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from conftest import QUIET, ROOT, TINY, compose_cfg, logged, run_script, train_command, train_tiny
from mha_project.errors import UserError
from mha_project.extras.run_record.record import differences, identity, open_run_dir

FAST = [*TINY, *QUIET]
RECORD = (
    "metrics.json",
    "model.keras",
    "vocab.txt",
    "history.csv",
    "run.json",
    ".hydra/config.yaml",
    ".hydra/overrides.yaml",
    "checkpoints/best.weights.h5",
    "train.log",  # a re-run that changes nothing adds no line to it either
)


def cfg(**changes):
    base = {
        "data": {"_target_": "mha_project.data.sources.FineFoods", "name": "fine_foods", "vocab_size": 400},
        "model": {"_target_": "mha_project.model.classifier.TextClassifier", "backbone": {"num_heads": 2}},
        "trainer": {"lr": 0.002},
        "seed": 1,
        "deterministic": False,
        "logger": {"tensorboard": True},
    }
    c = OmegaConf.create(base)
    for key, value in changes.items():
        OmegaConf.update(c, key, value)
    return c


def snapshot(run_dir: Path) -> dict:
    return {name: (run_dir / name).read_bytes() for name in RECORD if (run_dir / name).exists()}


# ---- fast: the mechanism in-process ---------------------------------------------------------------


def test_same_identity_reopens_and_other_identity_is_refused_naming_the_key(tmp_path):
    record = open_run_dir(tmp_path, cfg())
    record.finish_stage("trained", epochs_run=1)
    record.close()
    again = open_run_dir(tmp_path, cfg(**{"logger.tensorboard": False}))  # logging is not identity
    assert again.stage == "trained" and again.results["epochs_run"] == 1
    again.close()
    with pytest.raises(UserError, match=r"holds a different run \(trainer.lr: 0.002 -> 0.05\)"):
        open_run_dir(tmp_path, cfg(**{"trainer.lr": 0.05}))
    assert json.loads((tmp_path / "run.json").read_text())["stage"] == "trained"  # untouched


def test_overwrite_starts_a_new_record(tmp_path):
    record = open_run_dir(tmp_path, cfg())
    record.finish_stage("finished")
    record.close()
    (tmp_path / "metrics.json").write_text("{}")
    record = open_run_dir(tmp_path, cfg(**{"trainer.lr": 0.05}), overwrite=True)
    assert record.stage == "started" and not (tmp_path / "metrics.json").exists()
    record.close()


def test_second_open_while_locked_is_refused(tmp_path):
    first = open_run_dir(tmp_path, cfg())
    try:
        with pytest.raises(UserError, match=rf"in use by another training process \(pid {os.getpid()}\)"):
            open_run_dir(tmp_path, cfg())
    finally:
        first.close()
    open_run_dir(tmp_path, cfg()).close()  # released: no stale lock


def test_directory_without_run_json_is_refused_even_with_overwrite(tmp_path):
    (tmp_path / "metrics.json").write_text("{}")
    for overwrite in (False, True):
        with pytest.raises(UserError, match="no run of mha-project recorded \\(metrics.json\\)") as err:
            open_run_dir(tmp_path, cfg(), overwrite=overwrite)
        assert "run_record.overwrite=true:" in str(err.value) and "add run_record.overwrite=true" not in str(err.value)
    assert not (tmp_path / "run.json").exists() and (tmp_path / "metrics.json").read_text() == "{}"


def test_overwrite_removes_only_the_files_a_run_wrote_and_says_what_it_kept(tmp_path):
    record = open_run_dir(tmp_path, cfg())
    record.finish_stage("finished")
    record.close()
    own = ["metrics.json", "checkpoints/best.weights.h5", "tensorboard/train/events.out.tfevents.1.v2"]
    mine = ["notes.txt", "checkpoints/my_finetuned.weights.h5", "inspect/paper_figure.png", "tensorboard/my_notes.txt"]
    for name in own + mine:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(name)
    older = tmp_path / "inspect" / "attention_before.png"  # a project's name, on a file older than the run
    older.write_text("copied in, its time kept")
    os.utime(older, (0, 0))
    logs = tmp_path.parent / f"{tmp_path.name}_my_logs"  # tensorboard/validation: a link to the user's folder
    logs.mkdir()
    (logs / "events.out.tfevents.2.v2").write_text("mine")
    (tmp_path / "tensorboard" / "validation").symlink_to(logs)
    with logged("mha_project.training.train") as said:
        open_run_dir(tmp_path, cfg(**{"trainer.lr": 0.05}), overwrite=True).close()
    assert not any((tmp_path / name).exists() for name in own)
    assert all((tmp_path / name).read_text() == name for name in mine)
    assert older.exists()
    assert (logs / "events.out.tfevents.2.v2").read_text() == "mine" and (
        tmp_path / "tensorboard/validation"
    ).is_symlink()
    kept = next(line for line in said if "kept what this project did not write" in line)
    assert "inspect/paper_figure.png" in kept and "tensorboard/validation" in kept
    assert json.loads((tmp_path / "run.json").read_text())["config"]["trainer"]["lr"] == 0.05


def test_a_run_json_the_project_cannot_prove_it_wrote_is_refused_also_with_overwrite(tmp_path):
    from mha_project.run_dir import RUN_FORMAT

    files = {"history.csv": "epoch\n", "checkpoints/best.weights.h5": "w", "tensorboard/events.out.tfevents.1": "e"}
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    for written, needle in (
        ("not json", "is damaged: it is not valid JSON"),
        (json.dumps({"tool": "other", "format": 99}), "holds a run of format 99, written by another version"),
        (json.dumps({"format": RUN_FORMAT, "fingerprint": "f", "stage": "finished"}), "has no identity this project"),
        (json.dumps({"format": RUN_FORMAT, "stage": "bogus"}), "its stage 'bogus' is none of started, pretrained"),
        (json.dumps({"format": RUN_FORMAT, "results": [1]}), "its results are not a JSON object"),
    ):
        (tmp_path / "run.json").write_text(written)
        for overwrite in (False, True):
            with pytest.raises(UserError, match=re.escape(needle)) as refused:
                open_run_dir(tmp_path, cfg(), overwrite=overwrite)
            assert "\n" not in str(refused.value) and "add run_record.overwrite=true" not in str(refused.value)
        assert (tmp_path / "run.json").read_text() == written
    assert {name: (tmp_path / name).read_text() for name in files} == files


def test_a_lock_that_is_a_symbolic_link_is_refused_and_its_target_left_alone(tmp_path):
    target = tmp_path / "my_file.txt"
    target.write_text("mine")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / ".lock").symlink_to(target)
    with pytest.raises(UserError, match=r"\.lock cannot be the run's lock \(a symbolic link\); remove it"):
        open_run_dir(run_dir, cfg())
    assert target.read_text() == "mine" and not (run_dir / "run.json").exists()


@pytest.mark.slow
def test_cli_overwrite_never_deletes_a_users_files(tmp_path):
    # A directory of the user's own work that happens to use names a run writes is left alone.
    run_dir = tmp_path / "mine"
    own = {"metrics.json": "{}", "checkpoints/my_model.ckpt": "w", "tensorboard/events.mine": "e"}
    for name, text in own.items():
        (run_dir / name).parent.mkdir(parents=True, exist_ok=True)
        (run_dir / name).write_text(text)
    for extra in ([], ["run_record.overwrite=true"]):
        result = train_tiny(run_dir, *QUIET, *extra)
        assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr[-2000:]
        assert "no run of mha-project recorded (checkpoints, metrics.json, tensorboard)" in result.stderr
        assert "add run_record.overwrite=true" not in result.stderr
    assert {name: (run_dir / name).read_text() for name in own} == own
    assert not (run_dir / "run.json").exists() and not (run_dir / ".lock").exists()


def test_garbage_run_json_is_a_one_line_error(tmp_path):
    (tmp_path / "run.json").write_text("not json")
    with pytest.raises(UserError, match="run.json is damaged: it is not valid JSON"):
        open_run_dir(tmp_path, cfg())


def test_differences_lists_first_keys_and_counts_the_rest():
    old = {"model": {"a": 1, "b": 2, "c": 3, "d": 4}}
    new = {"model": {"a": 9, "b": 8, "c": 7, "d": 6}}
    assert differences(old, new) == ["model.a: 1 -> 9", "model.b: 2 -> 8", "model.c: 3 -> 7", "... 1 more"]


# ---- slow: through the real CLI -------------------------------------------------------------------


# A lean two-epoch run (no attention images, head view or SavedModel): what these tests read is the record.
FINISHED = [*QUIET, "data.limit=400", "epochs=2"]


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory) -> Path:
    run_dir = tmp_path_factory.mktemp("finished") / "run"
    result = train_tiny(run_dir, *FINISHED)
    assert result.returncode == 0, result.stderr[-3000:]
    return run_dir


def copy_of(run_dir: Path, tmp_path: Path) -> Path:
    target = tmp_path / "run"
    shutil.copytree(run_dir, target)
    return target


@pytest.mark.slow
def test_a_finished_run_whose_record_is_damaged_is_refused_and_left_exactly_as_it_was(finished_run, tmp_path):
    run_dir = copy_of(finished_run, tmp_path)
    record = json.loads((run_dir / "run.json").read_text())
    for damaged, needle in (
        ({**record, "stage": "bogus"}, "its stage 'bogus' is none of"),
        ({**record, "results": 3}, "its results are not a JSON object"),
    ):
        (run_dir / "run.json").write_text(json.dumps(damaged))
        before = {
            p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file() and p.name not in ("train.log", "hydra.yaml")
        }
        result = train_tiny(run_dir, *FINISHED)
        lines = result.stderr.strip().splitlines()
        assert result.returncode == 2 and len(lines) == 1 and needle in lines[0], result.stderr[-2000:]
        assert {
            p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file() and p.name not in ("train.log", "hydra.yaml")
        } == before
        assert not (run_dir / "failure.json").exists()


@pytest.mark.slow
@pytest.mark.parametrize(
    "overrides,named",
    [
        (["lr=1e-12"], "trainer.lr: 0.005 -> 1e-12"),
        (["heads=4", "data.vocab_size=300"], "data.vocab_size: 400 -> 300"),
        (["model.backbone.activation=relux"], "model.backbone.activation=relux is invalid"),
    ],
)
def test_rerun_with_other_settings_is_refused_and_changes_nothing(finished_run, tmp_path, overrides, named):
    run_dir = copy_of(finished_run, tmp_path)
    before = snapshot(run_dir)
    result = train_tiny(run_dir, *FINISHED, *overrides)
    assert result.returncode == 2, result.stderr[-2000:]
    assert named in result.stderr and "Traceback" not in result.stderr
    assert snapshot(run_dir) == before


@pytest.mark.slow
def test_same_command_again_reports_finished_and_rewrites_nothing(finished_run, tmp_path):
    run_dir = copy_of(finished_run, tmp_path)
    before = snapshot(run_dir)
    result = train_tiny(run_dir, *FINISHED)
    assert result.returncode == 0
    assert "already finished" in result.stdout and "Epoch" not in result.stdout
    recorded = json.loads((run_dir / "metrics.json").read_text())["test_accuracy"]
    assert f"test accuracy: {recorded:.4f}" in result.stdout
    assert snapshot(run_dir) == before


@pytest.mark.slow
def test_kill_while_saving_resumes_without_training_again(finished_run, tmp_path):
    run_dir = copy_of(finished_run, tmp_path)
    # The state a kill while saving leaves: tested, model.keras and metrics not yet written.
    state = json.loads((run_dir / "run.json").read_text())
    state["stage"] = "tested"
    (run_dir / "run.json").write_text(json.dumps(state))
    (run_dir / "model.keras").unlink()
    (run_dir / "metrics.json").unlink()
    history = (run_dir / "history.csv").read_bytes()
    result = train_tiny(run_dir, *FINISHED)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "resuming" in result.stdout and "after stage 'tested'" in result.stdout
    assert "Epoch " not in result.stdout  # no epoch trained again
    assert (run_dir / "history.csv").read_bytes() == history  # no duplicated rows
    assert (run_dir / "model.keras").exists()
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["test_accuracy"] == state["results"]["test_accuracy"]


@pytest.mark.slow
def test_overwrite_true_replaces_the_run(finished_run, tmp_path):
    run_dir = copy_of(finished_run, tmp_path)
    result = train_tiny(run_dir, *FINISHED, "epochs=1", "run_record.overwrite=true")
    assert result.returncode == 0, result.stderr[-2000:]
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["epochs_run"] == 1
    with open(run_dir / "history.csv", newline="") as f:
        assert [r["epoch"] for r in csv.DictReader(f)] == ["1"]
    assert "epochs: 1" in (run_dir / ".hydra" / "config.yaml").read_text()


@pytest.mark.subprocess
@pytest.mark.slow
def test_two_processes_on_one_run_dir(tmp_path):
    run_dir = tmp_path / "run"
    args = train_command(run_dir, *FAST, "epochs=2", "data.limit=600")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    first = subprocess.Popen(args, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 120
        while not (run_dir / "run.json").exists() and time.time() < deadline and first.poll() is None:
            time.sleep(0.05)
        # The first holds the lock (run.json is written under it) and is paused there, so the second starts
        # while the first is mid-run however fast either one is.
        first.send_signal(signal.SIGSTOP)
        second = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
        first.send_signal(signal.SIGCONT)
        assert second.returncode == 2, second.stderr[-2000:]
        assert f"in use by another training process (pid {first.pid})" in second.stderr
        assert first.wait(timeout=300) == 0, first.stderr.read()[-3000:]
        assert not (run_dir / "failure.json").exists()  # the refused second wrote nothing into the first's run
    finally:
        if first.poll() is None:
            first.send_signal(signal.SIGKILL)
    with open(run_dir / "history.csv") as f:
        assert sum(line.startswith("epoch,") for line in f) == 1  # one writer, one header


def test_a_run_that_never_trained_can_be_replaced_without_overwrite(tmp_path):
    record = open_run_dir(tmp_path, cfg())
    record.close()
    (tmp_path / "vocab.txt").write_text("stale\n")  # written before a later check failed
    record = open_run_dir(tmp_path, cfg(**{"trainer.lr": 0.05}))
    assert record.stage == "started" and not (tmp_path / "vocab.txt").exists()
    record.close()


@pytest.mark.slow
@pytest.mark.parametrize(
    "overrides,needle",
    [
        (["model.backbone.activation=bogus"], "model.backbone.activation=bogus is invalid"),
        (["trainer.validations_per_epoch=1000"], "trainer.validations_per_epoch=1000 is invalid"),
    ],
)
def test_values_checked_after_data_loading_fail_cleanly_and_leave_a_replaceable_dir(tmp_path, overrides, needle):
    # In-process: train() raises the one-line ConfigError (the CLI prints it, see the test below).
    from mha_project.errors import ConfigError
    from mha_project.training.train import train

    run_dir = tmp_path / "run"
    with pytest.raises(ConfigError, match=needle):
        train(compose_cfg(*TINY, *QUIET, *overrides), run_dir)
    assert not (run_dir / ".hydra").exists() and not (run_dir / "history.csv").exists()
    metrics = train(compose_cfg(*TINY, *QUIET), run_dir)  # the corrected command
    assert metrics["epochs_run"] == 1


def test_a_run_of_another_format_is_refused_in_one_line_by_training_and_by_the_tools(tmp_path):
    from mha_project.extras.analysis.finished import check_run_dir
    from mha_project.run_dir import RUN_FORMAT

    record = open_run_dir(tmp_path, cfg())
    record.finish_stage("finished")
    record.close()
    assert json.loads((tmp_path / "run.json").read_text())["format"] == RUN_FORMAT
    (tmp_path / ".hydra").mkdir()
    (tmp_path / ".hydra" / "config.yaml").write_text("seed: 1\n")
    for name in ("metrics.json", "model.keras", "vocab.txt"):
        (tmp_path / name).write_text("{}")
    check_run_dir(tmp_path)
    for found, shown in ((None, "0 (no format recorded)"), (RUN_FORMAT + 1, str(RUN_FORMAT + 1))):
        stored = json.loads((tmp_path / "run.json").read_text())
        stored.pop("format", None)
        (tmp_path / "run.json").write_text(json.dumps(stored if found is None else {**stored, "format": found}))
        needle = f"holds a run of format {shown}, written by another version of mha-project; this version reads"
        with pytest.raises(UserError, match=re.escape(needle)) as refused:
            open_run_dir(tmp_path, cfg())
        assert "\n" not in str(refused.value)
        with pytest.raises(UserError, match=re.escape(needle) + ".*use the release that wrote it"):
            check_run_dir(tmp_path)
        with pytest.raises(UserError, match=re.escape(needle)):  # nothing proves its files are this version's
            open_run_dir(tmp_path, cfg(), overwrite=True)
    assert (tmp_path / "metrics.json").read_text() == "{}"


def test_the_identity_holds_the_backend(monkeypatch):
    monkeypatch.setenv("KERAS_BACKEND", "tensorflow")
    on_tensorflow = identity(cfg())
    monkeypatch.setenv("KERAS_BACKEND", "jax")
    assert differences(on_tensorflow, identity(cfg())) == ["backend: tensorflow -> jax"]


def test_training_never_opens_a_run_json_that_is_no_regular_file(tmp_path):
    os.mkfifo(tmp_path / "run.json")  # opening a FIFO for reading would wait for a writer forever
    with pytest.raises(UserError, match=r"run.json is damaged: it is not a regular file"):
        open_run_dir(tmp_path, cfg())


@pytest.mark.slow
def test_a_sweep_rerun_with_other_settings_into_the_same_dir_is_refused_and_says_so(tmp_path):
    path = tmp_path / "s"
    first = run_script("train.py", "-m", "heads=1,2", *TINY, *QUIET, f"hydra.sweep.dir={path}")
    assert first.returncode == 0, first.stderr[-2000:]
    before = {p: p.read_bytes() for p in path.glob("*/metrics.json")}
    again = run_script("train.py", "-m", "heads=1,2", *TINY, *QUIET, "lr=0.05", f"hydra.sweep.dir={path}")
    assert again.returncode == 1
    assert "2 job(s) of the sweep were refused" in again.stderr and "trainer.lr: 0.005 -> 0.05" in again.stderr
    assert {p: p.read_bytes() for p in path.glob("*/metrics.json")} == before
    assert not list(path.glob("*/failure.json"))


def test_trim_history_keeps_header_and_earlier_epochs(tmp_path):
    from mha_project.extras.run_record.backup import trim_history

    path = tmp_path / "history.csv"
    path.write_text("epoch,accuracy\n1,0.5\n2,0.6\n3,0.7\n")  # epochs count from 1
    rows = trim_history(path, 2)
    assert [r["epoch"] for r in rows] == ["1", "2"]
    assert path.read_text().splitlines() == ["epoch,accuracy", "1,0.5", "2,0.6"]
    for cut in ("epoch,accuracy,loss\n1,0.5,0.7\n2,0.6,0.", "epoch,accuracy,loss\n1,0.5,0.7\n2,0.6\n"):
        path.write_text(cut)  # the last row cut off by a full disk: with or without its line end
        assert [r["epoch"] for r in trim_history(path, 2)] == ["1"]
        assert path.read_text().splitlines() == ["epoch,accuracy,loss", "1,0.5,0.7"]


def test_outputs_runs_latest_names_the_last_finished_run_and_never_replaces_a_users_file(tmp_path):
    from mha_project.extras.analysis.finished import check_run_dir
    from mha_project.extras.run_record.callback import point_latest_at
    from mha_project.run_dir import RUN_FORMAT

    for folder in ("runs", "debug"):  # debug=... runs land in outputs/debug/ and get their own latest
        runs = tmp_path / "outputs" / folder
        for name in ("2026-12-01_10-00-00", "2026-12-01_11-00-00"):
            (runs / name / ".hydra").mkdir(parents=True)
            point_latest_at(runs / name)
            assert (runs / "latest").is_file() and not (runs / "latest").is_symlink()  # TensorBoard walks no link
            assert (runs / "latest").read_text().splitlines()[0] == name  # a name: the outputs folder can move
        assert sorted(p.name for p in runs.iterdir()) == ["2026-12-01_10-00-00", "2026-12-01_11-00-00", "latest"]
    # Every tool takes the file where it takes a run dir, and names the run it resolved to.
    finished = tmp_path / "outputs" / "runs" / "2026-12-01_11-00-00"
    (finished / ".hydra" / "config.yaml").write_text("seed: 1\n")
    for name in ("metrics.json", "model.keras", "vocab.txt"):
        (finished / name).write_text("{}")
    (finished / "run.json").write_text(json.dumps({"format": RUN_FORMAT}))
    assert check_run_dir(tmp_path / "outputs" / "runs" / "latest") == finished

    elsewhere = tmp_path / "mine" / "run"
    elsewhere.mkdir(parents=True)
    point_latest_at(elsewhere)
    assert not (elsewhere.parent / "latest").exists()  # only outputs/runs/ and outputs/debug/ get one

    runs = tmp_path / "outputs" / "runs"
    for users in ("dir", "file", "link"):
        latest = runs / "latest"
        if latest.is_dir() and not latest.is_symlink():
            shutil.rmtree(latest)
        else:
            latest.unlink()
        if users == "dir":
            latest.mkdir()
            (latest / "notes.txt").write_text("mine")
        elif users == "file":
            latest.write_text("2026-12-01_10-00-00\n")  # one line, but not the project's file
        else:
            latest.symlink_to("2026-12-01_10-00-00")
        before = latest.read_text() if users == "file" else None
        point_latest_at(runs / "2026-12-01_10-00-00")
        if users == "dir":
            assert (latest / "notes.txt").read_text() == "mine"
        elif users == "file":
            assert latest.read_text() == before
        else:
            assert latest.is_symlink()
