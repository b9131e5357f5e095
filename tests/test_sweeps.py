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


@pytest.mark.slow
def test_tensorflows_retracing_warning_is_dropped_in_a_sweeps_jobs_only():
    # Every job of a sweep builds its own model in the same process, and TensorFlow counts their traces together:
    # from the third job on it warns of "retracing" that no job did. Its real warning, raised the way it is.
    import tensorflow as tf
    from hydra.conf import HydraConf
    from hydra.core.hydra_config import HydraConfig
    from hydra.core.utils import JobReturn, JobStatus
    from hydra.types import RunMode
    from omegaconf import OmegaConf

    from conftest import logged
    from mha_project.training.hydra_callbacks import ValidateConfig

    def in_a_job(x):
        return x + 1

    def outside(x):
        return x - 1

    def retrace(step) -> None:  # TensorFlow warns of one Python function a few times only: one function a phase
        for i in range(7):
            tf.function(step)(tf.constant(float(i)))  # a new function each time, as each job's new model has

    hydra = OmegaConf.structured(HydraConf)
    hydra.mode, hydra.job.num = RunMode.MULTIRUN, 3
    config = OmegaConf.create({"hydra": hydra})
    HydraConfig.instance().set_config(config)
    callback = ValidateConfig()
    try:
        callback.on_job_start(config)
        with logged("tensorflow") as in_the_job:
            retrace(in_a_job)
    finally:
        callback.on_job_end(config, JobReturn(status=JobStatus.COMPLETED, _return_value=0.5))
        HydraConfig.instance().cfg = None
    with logged("tensorflow") as after_it:
        retrace(outside)
    assert not [m for m in in_the_job if "retracing" in m]
    assert [m for m in after_it if "triggered tf.function retracing" in m]  # outside a sweep's job: as TensorFlow says
