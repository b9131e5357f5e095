"""Do several processes train one model as one process does? (Keras 3 + JAX, keras.distribution, gloo on CPU)

    python scripts/data_parallel_check.py                  # a tiny run: 2 processes on 127.0.0.1 against 1
    python scripts/data_parallel_check.py --rounds 2 epochs=3 logger.attention.every_n_epochs=0  # the default model

Trains `scripts/train.py trainer/strategy=data_parallel data.bucketing=false` with the overrides given
(default: `debug=tiny epochs=2 batch_size=16`) once as one process and once as N processes on 127.0.0.1
(a free port; process k gets Keras's KERAS_DISTRIBUTION_* variables and a run directory of its own), and prints
a JSON verdict: exit codes, whether every process's record holds the same model (its test metrics), the two
runs' test metrics side by side, and each one's training examples/s (the epochs after the first, from
history.csv; ``--rounds R`` runs the pair R times, alternating which goes first). Exit 0 when every process
finished, every process recorded the same model, and the two runs' metrics agree within TOLERANCE.

Both runs see the same global batches in the same order (each process keeps its slice of every batch), so
they differ only in how float32 gradients are summed (two half-batch sums added, or one sum): about 1e-7
of the loss per step. A lost or repeated example, or batches in another order, moves a tiny model's test
loss by 1e-3 or more, so 1e-4 separates the two.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from mha_project.extras.distribution.processes import finish_all
from mha_project.extras.timing.measures import steady_examples_per_second

from entry import fail, free_port

ROOT = Path(__file__).resolve().parents[1]
TOLERANCE = {"test_loss": 1e-4, "test_accuracy": 1e-6}
RUN = ["trainer/strategy=data_parallel", "data.bucketing=false"]
TINY = ["debug=tiny", "epochs=2", "batch_size=16"]


def train(run_dirs: list[Path], overrides: list[str], timeout: int = 900) -> list[dict]:
    """``scripts/train.py`` as ``len(run_dirs)`` processes of one run, process k writing into ``run_dirs[k]``."""
    env = dict(os.environ, KERAS_BACKEND="jax", TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1")
    if len(run_dirs) > 1:
        env.update(KERAS_DISTRIBUTION_JOB_ADDRESSES=f"127.0.0.1:{free_port()}")
        env.update(KERAS_DISTRIBUTION_NUM_PROCESSES=str(len(run_dirs)))
    workers = []
    start = time.perf_counter()
    for process_id, run_dir in enumerate(run_dirs):
        command = [sys.executable, str(ROOT / "scripts" / "train.py"), *RUN, *overrides, f"hydra.run.dir={run_dir}"]
        workers.append(
            subprocess.Popen(
                command,
                env=dict(env, KERAS_DISTRIBUTION_PROCESS_ID=str(process_id)) if len(run_dirs) > 1 else env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        )
    results = []
    for run_dir, (returncode, output) in zip(run_dirs, finish_all(workers, timeout=timeout)):
        run_dir.with_name(run_dir.name + ".out").write_text(output)  # what the process printed, beside its dir
        errors = [line for line in output.splitlines() if line.startswith("error:") or "Error: " in line]
        results.append({"returncode": returncode, "error": errors[-1:], "run_dir": str(run_dir)})
    results[0]["wall_seconds"] = round(time.perf_counter() - start, 1)
    return results


def metrics(run_dir: Path) -> dict:
    path = run_dir / "metrics.json"
    return json.loads(path.read_text()) if path.exists() else {}


def check(out: Path, processes: int, overrides: list[str], rounds: int = 1) -> dict:
    setups = {"one_process": ["one_process"], f"{processes}_processes": [f"process_{k}" for k in range(processes)]}
    first_round, speeds = {}, {name: [] for name in setups}
    for r in range(rounds):
        for name in list(setups) if r % 2 == 0 else list(setups)[::-1]:  # who goes first alternates
            dirs = [out / f"round_{r}" / d for d in setups[name]]
            finished = train(dirs, overrides)
            if r == 0:
                first_round[name] = finished  # exit codes and metrics are compared on round 0
            speed = steady_examples_per_second(dirs[0])
            speeds[name].append(None if speed is None else round(speed, 1))
    single, several = first_round["one_process"], first_round[f"{processes}_processes"]
    one, many = metrics(out / "round_0" / "one_process"), metrics(out / "round_0" / "process_0")
    difference = {k: abs(one[k] - many[k]) for k in TOLERANCE if k in one and k in many}
    # Each process tests its own copy of the replicated weights: every record holds the same model.
    same = {
        f"process_{k}": {key: metrics(out / "round_0" / f"process_{k}").get(key) == many.get(key) for key in TOLERANCE}
        for k in range(1, processes)
    }
    finished = all(r["returncode"] == 0 for r in single + several)
    return {
        "ok": finished
        and all(all(agree.values()) for agree in same.values())
        and len(difference) == len(TOLERANCE)
        and all(difference[k] <= TOLERANCE[k] for k in TOLERANCE),
        "one_process": single,
        f"{processes}_processes": several,
        "same_record_as_process_0": same,
        "metrics": {k: [one.get(k), many.get(k)] for k in (*TOLERANCE, "train_examples")},
        "difference": difference,
        "tolerance": TOLERANCE,
        "examples_per_second": speeds,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--out", type=Path, help="keep the run directories here (default: a temporary folder)")
    parser.add_argument("--rounds", type=int, default=1, help="pairs of runs, for the speed figures (default 1)")
    parser.add_argument("overrides", nargs="*", help=f"scripts/train.py overrides (default: {' '.join(TINY)})")
    args = parser.parse_args()
    if args.processes < 2 or args.rounds < 1:
        fail(f"--processes={args.processes} --rounds={args.rounds} is invalid: need >= 2 and >= 1")
    with tempfile.TemporaryDirectory() as scratch:
        verdict = check(args.out or Path(scratch), args.processes, args.overrides or TINY, args.rounds)
    print(json.dumps(verdict, indent=1))
    sys.exit(0 if verdict["ok"] else 1)


if __name__ == "__main__":
    main()
