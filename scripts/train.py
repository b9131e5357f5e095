"""Train the multi-head-attention classifier.

python scripts/train.py                              # offline default: Amazon Fine Food reviews
python scripts/train.py heads=8 key_dim=32 dropout=0.2
python scripts/train.py -m heads=1,2,4,8 key_dim=16,64
"""

from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig

from entry import import_tensorflow_quietly, report_run, run_hydra_app  # an error as one line and an exit code


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
        metrics = train(cfg)  # an error ends the command (a UserError in one line: hydra_callbacks.py)
        rose = None if finished_before or not cfg.logger.overfit_hint else loss_rose_after(run_dir / "history.csv")
        report_run(run_dir, metrics, finished_before, cfg.model.backbone is not None, rose)
        return metrics
    try:
        metrics = train(cfg)
    except Exception as err:  # noqa: BLE001 - a sweep's job: recorded by the Hydra callbacks, the sweep goes on
        return FailedJob(err)
    value = metrics.get(cfg.optimized_metric) if cfg.optimized_metric else None
    return float("nan") if value is None else float(value)  # what a sweeper (Optuna) optimises


if __name__ == "__main__":
    run_hydra_app(main)
