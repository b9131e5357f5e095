"""Wall time for finished runs to first reach a validation accuracy, side by side.

    python scripts/time_to_accuracy.py outputs/runs/<a> outputs/runs/<b> --target 0.867

Reads each run's history.csv (elapsed_seconds since fit began, per epoch) and metrics.json; prints a
Markdown table and, with --json, the same as JSON.
"""

import argparse
import json

from mha_project.errors import UserError

from entry import fail  # scripts/entry.py: an error as one line and an exit status


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dirs", nargs="+", help="run directories written by scripts/train.py")
    parser.add_argument("--target", type=float, default=0.867, help="validation accuracy to reach (default 0.867)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args()
    if not 0 < args.target <= 1:
        fail(f"--target={args.target} is invalid: must be a number in (0, 1]")
    try:
        from mha_project.extras.timing.measures import time_to_accuracy

        results = [time_to_accuracy(path, args.target) for path in args.run_dirs]
    except UserError as err:
        fail(str(err))
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print(f"| run | first epoch with val >= {args.target} | seconds | best val | test | train ex/s |")
    print("|---|---|---|---|---|---|")
    for r in results:
        never = "never" if r["reached_at_epoch"] is None else None
        print(
            f"| {r['run_dir']} | {never or r['reached_at_epoch']} | {never or r['seconds_to_target']} | "
            f"{r['best_val_accuracy']:.4f} | {r['test_accuracy']:.4f} | {r['train_examples_per_second']} |"
        )


if __name__ == "__main__":
    main()
