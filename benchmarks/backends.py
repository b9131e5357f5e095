"""Training speed of the default model on Keras's TensorFlow and JAX backends, in alternating processes.

    python benchmarks/backends.py --rounds 3                    # the default model and data
    python benchmarks/backends.py --rounds 3 -- data.limit=2000 # any train.py overrides after --

Each round trains once per backend (3 epochs, fresh run directory, same seed) and reads the second and third
epochs' time from history.csv (``elapsed_seconds`` differences: training plus the epoch's validation, after
the first epoch's tracing or compiling); backends alternate within a round, so a minute in which this CPU
runs slow costs both. Prints one JSON object: examples/s per round and backend, and the median ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from mha_project.extras.timing.measures import steady_examples_per_second

ROOT = Path(__file__).resolve().parents[1]
BACKENDS = ("tensorflow", "jax")


def train(backend: str, run_dir: Path, overrides: list[str]) -> float:
    command = [sys.executable, str(ROOT / "scripts" / "train.py"), "epochs=3", "trainer.early_stopping_patience=5"]
    command += ["logger.attention.every_n_epochs=0", "head_view.html=false", *overrides]
    command.append(f"hydra.run.dir={run_dir}")
    env = dict(os.environ, KERAS_BACKEND=backend, TF_CPP_MIN_LOG_LEVEL="3")
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"error: the {backend} run failed: {done.stderr.strip().splitlines()[-1:]}")
    return steady_examples_per_second(run_dir)  # mha_project.extras.timing.measures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3, help="rounds of one run per backend (default 3)")
    parser.add_argument("overrides", nargs="*", help="train.py overrides")
    args = parser.parse_args()
    if args.rounds < 1:
        sys.exit(f"error: --rounds={args.rounds} is invalid: must be an integer >= 1")
    speeds = {backend: [] for backend in BACKENDS}
    with tempfile.TemporaryDirectory() as scratch:
        for r in range(args.rounds):
            order = BACKENDS if r % 2 == 0 else BACKENDS[::-1]  # who goes first alternates too
            for backend in order:
                speeds[backend].append(round(train(backend, Path(scratch) / f"{backend}_{r}", args.overrides), 1))
    ratios = [j / t for t, j in zip(speeds["tensorflow"], speeds["jax"])]
    print(
        json.dumps(
            {
                "examples_per_second": speeds,
                "jax_over_tensorflow_per_round": [round(x, 3) for x in ratios],
                "jax_over_tensorflow_median": round(statistics.median(ratios), 3),
                "overrides": args.overrides,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
