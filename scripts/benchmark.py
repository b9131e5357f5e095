"""Training examples/s: a keras.io-style pipeline vs this project's, same data, same model, one process.

    python scripts/benchmark.py                                   # fine_foods, the default model
    python scripts/benchmark.py data=folder data.path=/tmp/aclImdb seq_len=512 data.limit=2000
    python scripts/benchmark.py --epochs 5 trainer.steps_per_execution=4
    python scripts/benchmark.py --variant trainer.precision=mixed_bfloat16 --variant model.attention_dropout=0

Each --variant (one override, or several separated by spaces) adds a model (c) trained with this
project's pipeline and those settings, timed in the same rounds, reported with its ratio to (b).

Takes the same overrides as scripts/train.py; prints one JSON object.
"""

import argparse
import json
from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra.errors import HydraException
from omegaconf.errors import OmegaConfBaseException

from mha_project.cli import fail
from mha_project.config import register_configs, validate_config
from mha_project.errors import UserError

CONFIGS = Path(__file__).resolve().parents[1] / "configs"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("overrides", nargs="*", help="Hydra overrides, as for scripts/train.py")
    parser.add_argument(
        "--epochs",
        type=int,
        default=3,
        help="timed rounds; each is one epoch of (a), (b) and every variant; the fastest of each is reported",
    )
    parser.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="OVERRIDES",
        help="extra settings for an additional project-pipeline model, e.g. trainer.jit_compile=true",
    )
    args = parser.parse_args()
    if args.epochs < 1:
        fail(f"--epochs={args.epochs} is invalid: must be an integer >= 1")
    register_configs()
    try:
        with initialize_config_dir(version_base="1.3", config_dir=str(CONFIGS)):
            cfg = compose(config_name="train", overrides=args.overrides)
            variants = {v: compose(config_name="train", overrides=[*args.overrides, *v.split()]) for v in args.variant}
        for checked in (cfg, *variants.values()):
            validate_config(checked)
        from mha_project.benchmark import run_benchmark

        result = run_benchmark(cfg, timed_epochs=args.epochs, variants=variants)
    except UserError as err:
        fail(str(err))
    except (HydraException, OmegaConfBaseException) as err:  # an override Hydra cannot apply
        fail(" ".join(str(err).split()))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
