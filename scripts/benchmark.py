"""Training examples/s: a keras.io-style pipeline vs this project's, same data, same model, one process.

    python scripts/benchmark.py                                   # fine_foods, the default model
    python scripts/benchmark.py data=folder data.path=/tmp/aclImdb seq_len=512 data.limit=2000
    python scripts/benchmark.py --epochs 5 trainer.steps_per_execution=4
    python scripts/benchmark.py --variant trainer.precision=mixed_bfloat16 --variant model.backbone.attention_dropout=0
    python scripts/benchmark.py --time-to-accuracy 0.867 experiment=imdb_fast data=folder data.path=/tmp/aclImdb
    python scripts/benchmark.py --time-to-accuracy 0.867 --repeats 5 experiment=imdb_fast_tail data=folder ...

    python scripts/benchmark.py --memory 200 data=folder data.path=/tmp/imdb_x16    # peak RSS as data grows

--time-to-accuracy T trains (a) the keras.io "Text classification with Transformer" recipe as published
(benchmarks/keras_io_recipe.py) and (b) this project's configuration in alternating rounds of a quarter
epoch on the same examples, each with its own clock, until both reach validation accuracy T.
--repeats N runs that race N times (fresh models, same seed) and adds every ratio and their median:
this CPU's speed flips by 2x within a minute, so one race's ratio depends on where the flips fell.

Each --variant (one override, or several separated by spaces) adds a model (c) trained with this
project's pipeline and those settings, timed in the same rounds, reported with its ratio to (b).

Takes the same overrides as scripts/train.py; prints one JSON object.
"""

import argparse
import json
import sys
from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra.errors import HydraException
from omegaconf.errors import OmegaConfBaseException

from mha_project.config import validate_config
from mha_project.errors import UserError

from entry import fail, import_tensorflow_quietly  # scripts/entry.py: an error as one line and an exit status

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "configs"
sys.path.insert(0, str(ROOT))  # benchmarks/ (the harness) sits beside the package, not inside it


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
    parser.add_argument(
        "--time-to-accuracy",
        type=float,
        metavar="T",
        help="instead of throughput: seconds of training each side needs to reach validation accuracy T",
    )
    parser.add_argument(
        "--memory",
        type=int,
        metavar="STEPS",
        help="instead of throughput: peak RSS of loading, vocabulary, pipeline and STEPS training batches",
    )
    parser.add_argument("--round-fraction", type=float, default=0.25, help="epoch fraction per round (default 0.25)")
    parser.add_argument("--max-rounds", type=int, help="stop after this many rounds (default: both sides' epochs)")
    parser.add_argument(
        "--repeats",
        type=int,
        default=1,
        help="with --time-to-accuracy: run the race N times in this process and report every ratio and the median",
    )
    args = parser.parse_args()
    if args.time_to_accuracy is not None and not 0.0 < args.time_to_accuracy <= 1.0:
        fail(f"--time-to-accuracy={args.time_to_accuracy} is invalid: must be a validation accuracy in (0, 1]")
    if not 0.0 < args.round_fraction <= 1.0:
        fail(f"--round-fraction={args.round_fraction} is invalid: must be in (0, 1]")
    if args.max_rounds is not None and args.max_rounds < 1:
        fail(f"--max-rounds={args.max_rounds} is invalid: must be an integer >= 1")
    if args.repeats < 1:
        fail(f"--repeats={args.repeats} is invalid: must be an integer >= 1")
    if args.memory is not None and args.memory < 1:
        fail(f"--memory={args.memory} is invalid: must be a number of training steps >= 1")
    if args.epochs < 1:
        fail(f"--epochs={args.epochs} is invalid: must be an integer >= 1")
    try:
        with initialize_config_dir(version_base="1.3", config_dir=str(CONFIGS)):
            cfg = compose(config_name="train", overrides=args.overrides)
            variants = {v: compose(config_name="train", overrides=[*args.overrides, *v.split()]) for v in args.variant}
        for checked in (cfg, *variants.values()):
            validate_config(checked)
        import_tensorflow_quietly()
        from benchmarks.race import run_time_to_accuracy
        from benchmarks.throughput import run_benchmark, run_memory_probe

        if args.memory is not None:
            result = run_memory_probe(cfg, steps=args.memory)
        elif args.time_to_accuracy is not None:
            result = run_time_to_accuracy(
                cfg,
                args.time_to_accuracy,
                round_fraction=args.round_fraction,
                max_rounds=args.max_rounds,
                repeats=args.repeats,
            )
        else:
            result = run_benchmark(cfg, timed_epochs=args.epochs, variants=variants)
    except UserError as err:
        fail(str(err))
    except (HydraException, OmegaConfBaseException) as err:  # an override Hydra cannot apply
        fail(" ".join(str(err).split()))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
