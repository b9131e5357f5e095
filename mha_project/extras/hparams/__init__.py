"""TensorBoard's HParams dashboard (``dashboard.py``): each run a session (its hyper-parameters when its fit
starts, its status and final metrics when it ends), each sweep one experiment config with its swept keys
marked. On with ``logger.hparams=true`` (and ``logger.tensorboard``)."""

from __future__ import annotations

from pathlib import Path

from mha_project.extending import RUN_END, SWEEP_START, fit_callbacks


def _records(cfg) -> bool:
    return bool(cfg.logger.tensorboard and cfg.logger.hparams)


@fit_callbacks
def session_start(cfg, job) -> list:
    if not _records(cfg):
        return []
    from mha_project.extras.hparams.dashboard import SessionStart

    return [SessionStart(cfg, job)]


def session_end(cfg, job, metrics) -> None:
    """Success with the final metrics; a failed run is marked failed once its session started (the checks
    passed and the run's config was written)."""
    if not _records(cfg):
        return
    if metrics is None and not (job.run_dir / ".hydra" / "config.yaml").exists():
        return
    from mha_project.extras.hparams.dashboard import write_session_end

    write_session_end(job.run_dir / "tensorboard", success=metrics is not None, metrics=metrics)


def sweep_experiment(config) -> None:
    """One HParams experiment config for the whole sweep, in the sweep directory, with the swept keys marked."""
    if not _records(config):
        return
    from mha_project.cli import import_tensorflow_quietly

    import_tensorflow_quietly()  # it writes with TensorFlow, whose start-up lines stay out of the output
    from mha_project.extras.hparams.dashboard import swept_domains, write_experiment
    from mha_project.training.hparams import sweep_params_of

    write_experiment(Path(config.hydra.sweep.dir), config, swept_domains(sweep_params_of(config)))


RUN_END.append(session_end)
SWEEP_START.append(sweep_experiment)
