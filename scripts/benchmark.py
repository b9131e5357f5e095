"""Training examples/s: a keras.io-style pipeline vs this project's, same data, same model, one process.

    python scripts/benchmark.py                                   # fine_foods, the default model
    python scripts/benchmark.py data=folder data.path=/tmp/aclImdb seq_len=512 data.limit=2000
    python scripts/benchmark.py --epochs 5 trainer.steps_per_execution=4

Takes the same overrides as scripts/train.py; prints one JSON object.
"""

import mha_project.cli  # noqa: F401  (quiet TensorFlow start-up; must come first)

import argparse
import json
from pathlib import Path

from hydra import compose, initialize_config_dir

from mha_project.cli import fail
from mha_project.config import register_configs, validate_config
from mha_project.errors import UserError

CONFIGS = Path(__file__).resolve().parents[1] / "configs"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("overrides", nargs="*", help="Hydra overrides, as for scripts/train.py")
    parser.add_argument("--epochs", type=int, default=3,
                        help="timed rounds; each is one epoch of (a) then one of (b); medians are reported")
    args = parser.parse_args()
    register_configs()
    try:
        with initialize_config_dir(version_base="1.3", config_dir=str(CONFIGS)):
            cfg = compose(config_name="train", overrides=args.overrides)
        validate_config(cfg)
        from mha_project.benchmark import run_benchmark

        result = run_benchmark(cfg, timed_epochs=args.epochs)
    except UserError as err:
        fail(str(err))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
