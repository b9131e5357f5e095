"""What pruning saves, and what a second worker adds, for ``hparams_search=optuna`` on the default data.

    python benchmarks/sweeps.py pruning --trials 20          # the same seeded sweep with pruner=median, then none
    python benchmarks/sweeps.py workers --trials 6           # one worker, then two on one SQLite study

Each sweep runs as its users run it (``python scripts/train.py -m hparams_search=optuna ...``, one process per
worker); the figures come from the study (Optuna's trial start and end times). Prints one JSON object; the
studies and runs stay in --out (default /tmp/mha_sweeps).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STUDY = "heads_key_dim_dropout"


def sweep(sweep_dir: Path, storage: str, trials: int, *overrides: str) -> subprocess.Popen:
    command = [
        sys.executable,
        str(ROOT / "scripts" / "train.py"),
        "-m",
        "hparams_search=optuna",
        f"hydra.sweep.dir={sweep_dir}",
        f"hydra.sweeper.storage={storage}",
        f"hydra.sweeper.n_trials={trials}",
        "logger.attention.every_n_epochs=0",
        "head_view.html=false",
        "savedmodel.export=false",
        *overrides,
    ]
    log = open(sweep_dir.with_suffix(".log"), "w")  # noqa: SIM115 - the child writes it; closed with the process
    return subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ))


def summary(storage: str) -> dict:
    import optuna

    trials = optuna.load_study(study_name=STUDY, storage=storage).get_trials(deepcopy=False)
    start = min(t.datetime_start for t in trials)
    end = max(t.datetime_complete for t in trials if t.datetime_complete)
    complete = [t for t in trials if t.state.name == "COMPLETE"]
    best = max(complete, key=lambda t: t.value)
    return {
        "trials": len(trials),
        "pruned": sum(t.state.name == "PRUNED" for t in trials),
        "failed": sum(t.state.name == "FAIL" for t in trials),
        "minutes": round((end - start).total_seconds() / 60, 2),
        "best_value": round(best.value, 4),
        "best_params": best.params,
        "minutes_to_best": round((best.datetime_complete - start).total_seconds() / 60, 2),
        "trials_per_minute": round(len(trials) / max((end - start).total_seconds() / 60, 1e-9), 2),
    }


def run(out: Path, name: str, trials: int, workers: int, *overrides: str) -> dict:
    storage = f"sqlite:///{out / name}.db"
    processes = []
    for k in range(workers):
        (out / f"{name}_{k}").mkdir(parents=True, exist_ok=False)
        processes.append(sweep(out / f"{name}_{k}", storage, trials, *overrides))
        time.sleep(1)  # the first creates the study
    codes = [p.wait() for p in processes]
    if any(codes):
        sys.exit(f"error: sweep {name} ended with {codes}; see {out}/{name}_*.log")
    return summary(storage)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", choices=("pruning", "workers"))
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--out", default="/tmp/mha_sweeps")
    parser.add_argument("overrides", nargs="*", help="scripts/train.py overrides for every trial")
    args = parser.parse_args()
    out = Path(args.out) / f"{args.what}_{time.strftime('%Y%m%d_%H%M%S')}"
    out.mkdir(parents=True)
    if args.what == "pruning":
        results = {
            "median": run(out, "median", args.trials, 1, "hydra.sweeper.pruner=median", *args.overrides),
            "none": run(out, "none", args.trials, 1, "hydra.sweeper.pruner=none", *args.overrides),
        }
    else:
        results = {
            "one_worker": run(out, "one", args.trials, 1, *args.overrides),
            "two_workers": run(out, "two", args.trials, 2, *args.overrides),
        }
    print(json.dumps({"out": str(out), "cpus": os.cpu_count(), **results}, indent=1))


if __name__ == "__main__":
    main()
