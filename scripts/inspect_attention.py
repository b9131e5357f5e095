"""Show what a trained model attends to in one sentence.

    python scripts/inspect_attention.py outputs/runs/<time> "the coffee was fresh and lovely"
    python scripts/inspect_attention.py outputs/runs/<time> "..." --out outputs/attention.png
    python scripts/inspect_attention.py outputs/runs/<time> "..." --html outputs/view.html   # interactive head view
    python scripts/inspect_attention.py outputs/runs/<time> "..." --view lines --heads 0:1 --out outputs/fig.svg
        # a figure of layer 0's head 1
    python scripts/inspect_attention.py RUN_A "..." --html outputs/both.html --compare RUN_B    # two runs side by side

Prints the predicted class, the tokens with their positions, and per layer and head its normalised
entropy (1 = uniform) and the tokens receiving the most attention (token@position weight); writes a
PNG grid (layers x heads) and the same images into the run's TensorBoard log (tensorboard/analysis).
"""

import argparse

from mha_project.errors import UserError
from mha_project.extras.analysis.finished import check_run_dir

from entry import fail, import_tensorflow_quietly  # scripts/entry.py: an error as one line and an exit status

VIEWS = ("heatmap", "lines")  # lines: the head_view extra's figure


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dir", help="a run directory written by scripts/train.py")
    parser.add_argument("text", help="the text to inspect")
    parser.add_argument("--out", help="a .png, .svg or .pdf (default: RUN_DIR/inspect/attention_<text>.png)")
    parser.add_argument("--view", default="heatmap", help="heatmap (default): the weights' grid; lines: the head view")
    parser.add_argument(
        "--heads",
        default="all",
        metavar="all|LAYER:HEAD,...",
        help="--view lines: all (a layers x heads grid) or layer:head pairs, e.g. 0:1,0:3 (layer 0's heads 1 and 3)",
    )
    parser.add_argument("--html", help="also write the interactive head view (one self-contained HTML file)")
    parser.add_argument("--top", type=int, default=3, help="tokens listed per head (default 3)")
    parser.add_argument("--max-tokens", type=int, default=24, help="tokens shown per heatmap axis (default 24)")
    parser.add_argument("--scale", default="shared", help="shared (default): one colour scale; per_head: one each")
    parser.add_argument("--compare", metavar="RUN2", help="with --html: this run and RUN2 side by side on the text")
    args = parser.parse_args()
    try:
        if args.view not in VIEWS:
            raise UserError(f"--view={args.view} is invalid: must be one of {', '.join(VIEWS)}")
        if args.heads != "all" and args.view != "lines":
            raise UserError(
                f"--heads={args.heads} is read by --view lines only; add --view lines, or leave --heads out"
            )
        check_run_dir(args.run_dir, needs_attention=True)  # answered in a second, before TensorFlow loads
        if args.compare:
            if not args.html:
                raise UserError("--compare needs --html FILE: the two head views are written there, side by side")
            check_run_dir(args.compare, needs_attention=True)
        import_tensorflow_quietly()
        from mha_project.extras.analysis.inspection import inspect_text
        from mha_project.extras.analysis.runs import load_run

        run = load_run(args.run_dir, needs_attention=True)
        draw = None
        if args.view == "lines":  # the head_view extra's figure, checked against the run's heads before it draws
            from mha_project.extras.head_view.lines import lines_view
            from mha_project.model.backbone import encoder_blocks

            draw = lines_view(args.heads, [block.attention.num_heads for block in encoder_blocks(run.model)])
        result = inspect_text(
            run, args.text, out=args.out, top_k=args.top, max_tokens=args.max_tokens, scale=args.scale, draw=draw
        )
        if args.html:  # the head_view extra's page: this run, or this run and RUN2 side by side
            from mha_project.extras.head_view.notebook import compare, show

            view = compare(run, args.compare, args.text) if args.compare else show(run, args.text, args.text[:80])
            try:
                view.save(args.html)
            except OSError as err:
                raise UserError(
                    f"cannot write {args.html} ({err.strerror or err}); pass --html with a writable path"
                ) from None
    except UserError as err:
        fail(str(err))
    if result["notice"]:
        print(result["notice"])
    print(f"predicted: {result['predicted']} (p={result['probability']:.3f})")
    print("tokens: " + " ".join(f"{i}:{tok}" for i, tok in enumerate(result["tokens"])))
    print(
        f"uniform attention = 1/{len(result['tokens'])} = {result['uniform']:.3f} per token. Per head: the mean "
        "normalised entropy of its query rows (1.00 = uniform, 0 = one token), then the tokens that receive the "
        "most attention (token@position, the mean weight the queries give it)"
    )
    for row in result["top"]:
        listed = ", ".join(f"{tok}@{i} {p:.2f}" for i, tok, p in row["tokens"])
        entropy = row["normalized_entropy"]
        print(f"layer {row['layer']} head {row['head']} (row entropy {entropy:.2f}) receives most: {listed}")
    print(f"picture: {result['png']}")
    if args.html:
        print(f"head view: {args.html} (open it in a browser; works offline)")


if __name__ == "__main__":
    main()
