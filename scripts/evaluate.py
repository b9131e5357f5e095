"""Reload a finished run and measure it on its test split again.

python scripts/evaluate.py outputs/runs/<time>
"""

import argparse
import json
import sys

from mha_project.errors import UserError
from mha_project.extras.analysis.finished import check_run_dir

from entry import fail, import_tensorflow_quietly  # scripts/entry.py: an error as one line and an exit status


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dir", help="a run directory written by scripts/train.py")
    args = parser.parse_args()
    try:
        check_run_dir(args.run_dir)  # answered in a second, before TensorFlow loads
        import_tensorflow_quietly()
        from mha_project.extras.analysis.evaluate import evaluate_run

        result = evaluate_run(args.run_dir)
    except UserError as err:
        fail(str(err))
    for change in result["data_changed"]:
        print(f"warning: {change}", file=sys.stderr)
    print(json.dumps(result, indent=2))
    print(
        f"test accuracy: {result['test_accuracy']:.4f}  (recorded at training: {result['recorded_test_accuracy']:.4f})"
    )


if __name__ == "__main__":
    main()
