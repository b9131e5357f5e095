"""What ``model.ngram_branch.c=auto`` costs and gives: plain ``experiment=wide_deep`` (C chosen on the validation
split) against the same run with a fixed C, seed by seed, alternating in one process (the machine's speed drifts):

    python benchmarks/ngram_c_auto.py --seeds 1 2 3 --fixed 0.14                         # fine_foods
    python benchmarks/ngram_c_auto.py --seeds 1 2 3                       # against the C each auto run chose
    python benchmarks/ngram_c_auto.py --seeds 1 --fixed 0.14 data=folder data.path=/tmp/aclImdb

The arguments after the options are scripts/train.py overrides. Prints one JSON line per run (seed, C, test
accuracy, wall seconds of train() and of the choice within it) and, last, the means and the wall-time ratio
auto / fixed.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np
from hydra import compose, initialize_config_dir

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument(
        "--fixed", type=float, default=None,
        help="a hand-set C to compare with; without it, the C the auto run chose: the same fit, so the ratio is "
        "what choosing costs",
    )  # fmt: skip
    args, overrides = parser.parse_known_args()
    from mha_project.training.train import train

    rows = []
    with initialize_config_dir(str(ROOT / "configs"), version_base=None), tempfile.TemporaryDirectory() as tmp:
        for seed in args.seeds:
            for c in ("auto", args.fixed):
                c = rows[-1]["chosen_c"] if c is None else c
                cfg = compose("train", [
                    "experiment=wide_deep", f"seed={seed}", f"model.ngram_branch.c={c}", "savedmodel.export=false",
                    "logger.attention.every_n_epochs=0", *overrides,
                ])  # fmt: skip
                start = time.perf_counter()
                metrics = train(cfg, Path(tmp) / f"{seed}_{c}")
                seconds = time.perf_counter() - start
                chosen = metrics.get("chosen", {}).get("ngram_c", {})
                row = {"seed": seed, "c": c, "chosen_c": chosen.get("c", c), "test_accuracy": metrics["test_accuracy"],
                       "seconds": round(seconds, 1), "choice_seconds": chosen.get("seconds", 0.0)}  # fmt: skip
                print(json.dumps(row), flush=True)
                rows.append(row)
    auto = [r for r in rows if r["c"] == "auto"]
    fixed = [r for r in rows if r["c"] != "auto"]
    print(json.dumps({
        "auto_test_accuracy": float(np.mean([r["test_accuracy"] for r in auto])),
        "fixed_test_accuracy": float(np.mean([r["test_accuracy"] for r in fixed])),
        "wall_ratio_auto_over_fixed": float(np.mean([a["seconds"] / f["seconds"] for a, f in zip(auto, fixed)])),
    }))  # fmt: skip


if __name__ == "__main__":
    main()
