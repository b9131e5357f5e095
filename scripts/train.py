"""Train the multi-head-attention classifier.

python scripts/train.py                              # offline default: Amazon Fine Food reviews
python scripts/train.py heads=8 key_dim=32 dropout=0.2
python scripts/train.py -m heads=1,2,4,8 key_dim=16,64
"""

import logging
import shlex
import signal
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig

from mha_project.quiet import import_tensorflow_quietly

from entry import end_within, run_hydra_app  # an error as one line and an exit code


@hydra.main(version_base="1.3", config_path="../configs", config_name="train")
def main(cfg: DictConfig):
    # The one deferred import: TensorFlow loads only after Hydra's callback has validated the config, so a
    # bad value is answered in about a second (the config and the callback import no TensorFlow).
    import_tensorflow_quietly()
    from mha_project.run_dir import METRICS_FILE
    from mha_project.training.fit import loss_rose_after
    from mha_project.training.hydra_callbacks import FailedJob
    from mha_project.training.train import train

    run_dir = Path(cfg.run_dir)
    finished_before = (run_dir / METRICS_FILE).is_file()
    if HydraConfig.get().mode != RunMode.MULTIRUN:
        # Imported here: a sweep job of hydra/launcher=submitit_local unpickles main() in a process that does
        # not have this folder on sys.path, and only a single run reports this way.
        from entry import report_run

        try:
            metrics = train(cfg)  # an error ends the command (a UserError in one line: hydra_callbacks.py)
        except KeyboardInterrupt:
            raise interrupted(cfg, run_dir) from None
        rose = None if finished_before or not cfg.logger.overfit_hint else loss_rose_after(run_dir / "history.csv")
        report_run(run_dir, metrics, finished_before, cfg.model.backbone is not None, rose)
        return metrics
    try:
        metrics = train(cfg)
    except Exception as err:  # noqa: BLE001 - a sweep's job: recorded by the Hydra callbacks, the sweep goes on
        return FailedJob(err)
    logging.getLogger("mha_project.training.train").info(f"test accuracy: {metrics['test_accuracy']:.4f}")
    value = metrics.get(cfg.optimized_metric) if cfg.optimized_metric else None
    return float("nan") if value is None else float(value)  # what a sweeper (Optuna) optimises


_signals = []  # the stop signal received


def _stop(signum, frame):
    # SIGTERM as Ctrl-C: Keras stops between two batches and the run directory stays resumable.
    _signals.append(signum)
    raise KeyboardInterrupt


def interrupted(cfg: DictConfig, run_dir: Path):
    """The one line for a stopped run: the epoch it was in and the command that resumes it."""
    from mha_project.errors import Interrupted
    from mha_project.training.fit import read_history

    signum = _signals[-1] if _signals else signal.SIGINT
    history = run_dir / "history.csv"  # written from the fit's first epoch on
    done = len({row["epoch"] for row in read_history(history)})
    where = f"in epoch {done + 1} of {cfg.trainer.epochs}" if history.is_file() else "before the fit's first epoch"
    command = shlex.join(["python", "scripts/train.py", *HydraConfig.get().overrides.task, f"hydra.run.dir={run_dir}"])
    return Interrupted(
        f"interrupted {where} ({signal.Signals(signum).name}); resume with: {command}",
        signum,
    )


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, _stop)
    end_within(15)  # a data-parallel worker whose peer died waits in a collective that never returns
    run_hydra_app(main)
