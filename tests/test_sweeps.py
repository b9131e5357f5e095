"""Multirun: each job its own run dir, failed jobs recorded, the launchers."""

import json

import pytest

from conftest import QUIET, TINY, run_script, run_sweep


@pytest.mark.slow
def test_multirun_jobs_keep_their_own_results(sweep_dir):
    finished = {json.loads((sweep_dir / j / "metrics.json").read_text())["hparams"]["heads"] for j in ("1", "2")}
    assert finished == {1, 2}
    for job in ("1", "2"):
        assert (sweep_dir / job / "model.keras").exists() and (sweep_dir / job / "tensorboard").is_dir()
    failure = json.loads((sweep_dir / "0" / "failure.json").read_text())
    assert failure["status"] == "failed" and "heads=0" in failure["reason"]
    assert "heads=0" in failure["overrides"]  # the job's own overrides, as a command to run it again


@pytest.mark.slow
def test_submitit_local_launcher_runs_each_job_in_its_own_dir(tmp_path):
    """The same launcher family as SLURM (hydra-submitit-launcher), as local processes."""
    sweep = tmp_path / "s"
    result = run_sweep(sweep, "seed=1,2", *TINY, "hydra/launcher=submitit_local")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    seeds = {json.loads((sweep / job / "metrics.json").read_text())["hparams"]["seed"] for job in ("0", "1")}
    assert seeds == {1, 2}


@pytest.mark.slow
def test_a_sweep_whose_every_job_failed_exits_non_zero(tmp_path):
    result = run_script("train.py", "-m", "heads=0,-1", *TINY, *QUIET, f"hydra.sweep.dir={tmp_path / 's'}")
    assert result.returncode == 1
    assert "every job of the sweep failed (2 jobs in" in result.stderr and "Traceback" not in result.stderr
