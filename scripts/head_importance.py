"""Measure, for every layer and head of a trained run, the validation accuracy lost when it is masked.

    python scripts/head_importance.py outputs/runs/<time>

Writes head_importance.{md,json,png} into RUN_DIR/head_importance/ and the heatmap into the run's
TensorBoard log. Method: Michel, Levy & Neubig, "Are Sixteen Heads Really Better than One?" (2019).
"""

import argparse

from mha_project.errors import UserError
from mha_project.extras.analysis.finished import check_out_folder, check_run_dir

from entry import fail, import_tensorflow_quietly  # scripts/entry.py: an error as one line and an exit status


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dir", help="a run directory written by scripts/train.py")
    parser.add_argument("--out", help="folder for the table and picture (default RUN_DIR/head_importance)")
    args = parser.parse_args()
    try:
        check_run_dir(args.run_dir, needs_attention=True)  # answered in a second, before TensorFlow loads
        check_out_folder(args.out, "head_importance.png, .md, .json")
        import_tensorflow_quietly()
        from mha_project.extras.head_analysis.importance import run_head_importance

        result = run_head_importance(args.run_dir, args.out)
    except UserError as err:
        fail(str(err))
    print(f"validation accuracy, all heads: {result['baseline']:.4f}")
    print(result["table"], end="")
    print(f"wrote {result['out_dir']}/head_importance.png, .md, .json")


if __name__ == "__main__":
    main()
