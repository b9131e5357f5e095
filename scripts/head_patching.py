"""Which head does the work: activation patching of every head of a trained run.

    python scripts/head_patching.py outputs/runs/<time>
    python scripts/head_patching.py outputs/runs/<time> --pairs 500 --out patching/

Runs clean texts and corrupted twins (data=relations: the twin differs in the one word the task's rule reads;
other data: the most-attended token replaced), puts one head's clean output into the corrupted run and measures
the share of the clean answer it restores (mha_project/extras/head_analysis/patching.py). Writes patching.json,
patching.png and patching.md (patching beside attention mass and ablation, one row per head) into
RUN_DIR/head_patching/, and the picture and one scalar per head into the run's TensorBoard (analysis run).
"""

import argparse

from mha_project.errors import UserError
from mha_project.extras.analysis.finished import check_out_folder, check_run_dir

from entry import fail, import_tensorflow_quietly  # scripts/entry.py: an error as one line and an exit status


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dir", help="a run directory written by scripts/train.py")
    parser.add_argument("--pairs", type=int, default=200, help="clean/corrupted pairs to average over (default 200)")
    parser.add_argument("--out", help="folder for patching.json, .png, .md (default RUN_DIR/head_patching)")
    args = parser.parse_args()
    try:
        check_run_dir(args.run_dir, needs_attention=True)  # answered in a second, before TensorFlow loads
        check_out_folder(args.out, "patching.json, patching.png, patching.md")
        if args.pairs < 1:
            raise UserError(f"--pairs={args.pairs} is invalid: must be an integer >= 1")
        import_tensorflow_quietly()
        from mha_project.extras.head_analysis.patching import run_head_patching

        result = run_head_patching(args.run_dir, args.pairs, args.out)
    except UserError as err:
        fail(str(err))
    print(result["table"], end="")
    layer, head = result["top"]
    print(f"top: layer {layer} head {head} restores {result['recovered'][layer][head]:.3f} of the answer")
    print(f"wrote {result['out_dir']}/patching.json, .png, .md")


if __name__ == "__main__":
    main()
