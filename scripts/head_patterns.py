"""Name what each attention head does: entropy and positional attention mass per layer x head.

    python scripts/head_patterns.py outputs/runs/<time>
    python scripts/head_patterns.py outputs/runs/<time> --texts 500 --json
    python scripts/head_patterns.py outputs/runs/<time> --pretrained   # the encoder as pretrain=mlm left it

Over the first N validation texts (default 200): mean normalised entropy (1 = uniform), attention mass
on the previous / next token, on itself, on the first token and on other copies of the same word, and
a label per head (rules in mha_project/extras/head_analysis/patterns.py). Writes head_patterns.{json,md,png} into
RUN_DIR/head_patterns/ and the picture and scalars into RUN_DIR/tensorboard/analysis/.
With --json, prints one JSON object {"heads": [{"layer", "head", "normalized_entropy", ...}, ...]}.
"""

import argparse
import json

from mha_project.errors import UserError
from mha_project.extras.analysis.finished import check_out_folder, check_run_dir

from entry import fail, import_tensorflow_quietly  # scripts/entry.py: an error as one line and an exit status


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dir", help="a run directory written by scripts/train.py")
    parser.add_argument("--texts", type=int, default=200, help="validation texts to average over (default 200)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    parser.add_argument("--out", help="folder for the table and picture (default RUN_DIR/head_patterns)")
    parser.add_argument(
        "--pretrained",
        action="store_true",
        help="the run's masked language model (pretrain=mlm) instead of the fine-tuned classifier; "
        "writes into RUN_DIR/pretrain/head_patterns",
    )
    args = parser.parse_args()
    try:
        check_run_dir(args.run_dir, needs_attention=True)  # answered in a second, before TensorFlow loads
        check_out_folder(args.out, "head_patterns.png, .md, .json")
        import_tensorflow_quietly()
        from mha_project.extras.head_analysis.patterns import format_relations, format_table, run_head_patterns

        result = run_head_patterns(args.run_dir, args.texts, args.out, pretrained=args.pretrained)
    except UserError as err:
        fail(str(err))
    if args.json:
        keys = ("run_dir", "model", "split", "texts", "thresholds", "heads", "relations")
        print(json.dumps({k: result[k] for k in keys}))
        return
    print(
        f"{result['model']}: {result['texts']} validation texts; chance level of a single position: "
        f"{result['heads'][0]['uniform_mass']:.3f} (mean 1/n)"
    )
    print(format_table(result["heads"]))
    if result["relations"]:  # data built by a known rule: which head follows each relation
        print(format_relations(result["relations"]))
    print(f"wrote {result['out_dir']}/head_patterns.png, .md, .json")


if __name__ == "__main__":
    main()
