"""The run record extra's resume: a killed or disk-full run, run again, ends as the run never killed would have."""

import csv
import json
import os
import subprocess
from pathlib import Path

import pytest

from conftest import QUIET, ROOT, TINY, kill_when, poll, run_script, train_command, train_tiny
from mha_project.extras.run_record.backup import backed_up_epochs

RESUME = [
    *TINY,
    "epochs=8",  # early stopping ends it before epoch 8 (patience 2): its state must survive the kill
    "data.limit=600",
    "trainer.early_stopping_patience=2",
    "deterministic=true",
    *QUIET,
]


def history_epochs(path: Path) -> list[int]:
    if not path.exists():
        return []
    with open(path, newline="") as f:
        return [int(r["epoch"]) for r in csv.DictReader(f) if r.get("epoch", "").isdigit()]


@pytest.mark.subprocess
@pytest.mark.slow
def test_sigkill_then_resume_ends_as_the_run_never_killed(tmp_path):
    # Fresh processes: a kill is the behaviour under test (and op determinism, once on, stays on in a process).
    # Two processes with the same seed and deterministic=true give the same numbers: the killed process's
    # epochs, written before the kill, equal the clean run's. The wide-and-deep model holds the encoder (its
    # dropout state, early stopping's count) and more that must come back: the NB bag's ratios, its penalty's
    # count of training texts and its own optimizer (MultiOptimizer).
    bag = ["model=wide_deep", "model.ngram_branch.features=1024", "optimizer=wide_deep", "optimizer.ngram_lr=0.01"]
    sigkill_then_resume(tmp_path, [*RESUME, *bag])


def sigkill_then_resume(tmp_path, overrides: list[str]) -> None:
    """A run of ``overrides`` killed after two backed-up epochs and resumed ends as the same run never killed
    (which early stopping ends before its last epoch)."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")

    def command(run_dir):
        return train_command(run_dir, *overrides)

    clean = subprocess.run(command(tmp_path / "clean"), cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert clean.returncode == 0, clean.stderr[-3000:]
    never_killed = json.loads((tmp_path / "clean" / "metrics.json").read_text())
    assert never_killed["stopped_early"]  # so early stopping's state is tested
    last = never_killed["epochs_run"]
    run_dir = tmp_path / "run"
    cmd = command(run_dir)
    # Kill once two epochs are backed up: the third epoch's batch order, the dropout's random state and early
    # stopping's count (one epoch without improvement so far) must all come back as they were.
    kill_when(cmd, lambda: backed_up_epochs(run_dir / "backup") >= 2, env)
    done_before = max(history_epochs(run_dir / "history.csv"))
    assert not (run_dir / "metrics.json").exists()
    assert done_before <= 3  # epochs count from 1

    # A resume with other settings would mix two models in one record: refused (in process: before any
    # TensorFlow state is set), nothing touched.
    history_before = (run_dir / "history.csv").read_bytes()
    other = run_script("train.py", *overrides, f"hydra.run.dir={run_dir}", "dropout=0.5", "lr=0.05")
    assert other.returncode == 2 and "holds a different run (model.backbone.dropout: 0.3 -> 0.5" in other.stderr
    assert (run_dir / "history.csv").read_bytes() == history_before

    result = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["epochs_run"] == last
    epochs = history_epochs(run_dir / "history.csv")
    assert epochs == list(range(1, last + 1))  # each epoch once, in order, counted from 1 as Keras's progress line
    with open(run_dir / "history.csv", newline="") as f:
        elapsed = [float(r["elapsed_seconds"]) for r in csv.DictReader(f)]
    assert elapsed == sorted(elapsed)  # training time keeps counting across the restart
    assert metrics["train_seconds"] >= elapsed[-1]
    # At most one epoch of work is repeated: the resumed run starts at most one epoch back.
    resumed_epochs = [line for line in result.stdout.splitlines() if line.startswith("Epoch ")]
    assert len(resumed_epochs) <= last - done_before + 1, resumed_epochs
    assert "Epoch 1/8" not in resumed_epochs
    # The resumed run is the run never killed: every epoch's numbers, where it stopped and the test.
    for key in ("test_accuracy", "test_loss", "best_val_accuracy", "best_epoch", "epochs_run", "stopped_early"):
        assert metrics[key] == never_killed[key], key
    columns = ("epoch", "accuracy", "loss", "val_accuracy", "val_loss")

    def epochs_of(path):
        with open(path, newline="") as f:
            return [[row[c] for c in columns] for row in csv.DictReader(f)]

    assert epochs_of(run_dir / "history.csv") == epochs_of(tmp_path / "clean" / "history.csv")


@pytest.mark.slow
def test_disk_full_while_saving_names_the_stage_and_the_same_command_resumes(tmp_path, monkeypatch):
    import errno

    import mha_project.training.train
    from conftest import compose_cfg
    from mha_project.errors import UserError

    def no_space(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    run_dir = tmp_path / "run"
    cfg = compose_cfg(*TINY, "logger.attention.every_n_epochs=0")
    with monkeypatch.context() as full:
        full.setattr(mha_project.training.train, "save_model_atomic", no_space)  # model.keras finds the disk full
        with pytest.raises(UserError, match="no space left on device while saving the model") as err:
            mha_project.training.train.train(cfg, run_dir)
    assert "stage 'tested'" in str(err.value) and "run the same command again" in str(err.value)
    assert json.loads((run_dir / "run.json").read_text())["stage"] == "tested"
    history = (run_dir / "history.csv").read_bytes()
    metrics = mha_project.training.train.train(cfg, run_dir)  # space freed: it resumes after the last stage
    assert (run_dir / "model.keras").exists() and metrics["epochs_run"] == 1
    assert (run_dir / "history.csv").read_bytes() == history  # no epoch trained again


@pytest.mark.subprocess
@pytest.mark.slow
def test_a_full_disk_through_the_cli_is_one_line_and_the_run_resumes_when_space_is_freed(tmp_path):
    # A real full file system: a tmpfs too small for a tiny run (mounting needs root, as CI runs).
    mount = tmp_path / "small"
    mount.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=800k", "tmpfs", str(mount)]).returncode != 0:
        pytest.skip("mounting a small tmpfs needs root")
    try:
        run_dir = mount / "run"
        full = train_tiny(run_dir, "data.limit=200")
        assert full.returncode == 2, full.stderr[-3000:]
        assert "Traceback" not in full.stderr and "Logging error" not in full.stderr
        assert full.stderr.strip().splitlines()[-1].startswith("error: no space left on device"), full.stderr[-2000:]
        assert not (run_dir / "export" / "saved_model.pb").exists()  # the disk filled before the end
        assert subprocess.run(["mount", "-o", "remount,size=8m", str(mount)]).returncode == 0
        resumed = train_tiny(run_dir, "data.limit=200")
        assert resumed.returncode == 0, resumed.stderr[-3000:]
        assert json.loads((run_dir / "metrics.json").read_text())["epochs_run"] == 1
        assert (run_dir / "export" / "saved_model.pb").exists() and (run_dir / "attention.html").exists()
        assert not list(run_dir.glob(".tmp-*"))  # nothing half-written left behind
    finally:
        subprocess.run(["umount", "-l", str(mount)])


@pytest.mark.subprocess
@pytest.mark.slow
def test_ctrl_c_or_sigterm_stops_a_run_in_one_line_and_the_command_it_prints_resumes_it(tmp_path):
    # Fresh processes: a stop signal to the command is the behaviour under test.
    import re
    import shlex
    import signal

    run_dir = tmp_path / "run"
    command = train_command(run_dir, *TINY, "epochs=6", "trainer.early_stopping_patience=6", "data.limit=600", *QUIET)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    for signum in (signal.SIGINT, signal.SIGTERM):
        before = backed_up_epochs(run_dir / "backup")  # the signal once this process has trained an epoch more
        # A suite started in the background (`pytest &`) ignores SIGINT, and a child inherits an ignored signal:
        # the command must start with Ctrl-C's default, as from a terminal.
        previous = signal.signal(signal.SIGINT, signal.default_int_handler)
        try:
            process = subprocess.Popen(
                command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
            )
        finally:
            signal.signal(signal.SIGINT, previous)
        poll(
            lambda p=process, n=before: p.poll() is not None or backed_up_epochs(run_dir / "backup") > n,
            seconds=240,
        )
        assert process.poll() is None, process.communicate()[1][-2000:]
        process.send_signal(signum)
        _, err = process.communicate(timeout=120)
        assert process.returncode == 128 + signum and "Traceback" not in err, err[-3000:]
        line = err.strip().splitlines()[-1]
        name = signal.Signals(signum).name
        assert re.fullmatch(
            rf"error: interrupted in epoch [2-6] of 6 \({name}\); resume with: python scripts/train.py .*", line
        )
        assert not (run_dir / "metrics.json").exists()
    resume = shlex.split(line.split("resume with: ")[1])
    assert resume[:2] == ["python", "scripts/train.py"] and resume[-1] == f"hydra.run.dir={run_dir}"
    result = run_script("train.py", *resume[2:])  # the printed command, run in this process
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads((run_dir / "metrics.json").read_text())["epochs_run"] == 6
    assert history_epochs(run_dir / "history.csv") == [1, 2, 3, 4, 5, 6]  # each epoch once, in order
