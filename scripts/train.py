"""Train the multi-head-attention classifier.

python scripts/train.py                              # offline default: Amazon Fine Food reviews
python scripts/train.py heads=8 key_dim=32 dropout=0.2
python scripts/train.py -m heads=1,2,4,8 key_dim=16,64
"""

import hydra
from omegaconf import DictConfig

import mha_project.extras  # noqa: F401  (every extra present registers itself with the core)
from mha_project.cli import import_tensorflow_quietly
from mha_project.config import register_configs

from entry import run_hydra_app  # scripts/entry.py: an error as one line and an exit status

register_configs()


@hydra.main(version_base="1.3", config_path="../configs", config_name="train")
def main(cfg: DictConfig):
    # The one deferred import: TensorFlow loads only after Hydra's callback has validated the config, so a
    # bad value is answered in about a second (mha_project.config and the callback import no TensorFlow).
    import_tensorflow_quietly()
    from mha_project.training.command import run_from_cli

    return run_from_cli(cfg)


if __name__ == "__main__":
    run_hydra_app(main)
