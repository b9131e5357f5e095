"""Ask a run's masked language model (its `pretrain=mlm` stage) to fill in [MASK].

    python scripts/fill_mask.py outputs/runs/<time> "the coffee was [MASK] and bitter"
    python scripts/fill_mask.py outputs/runs/<time> "a [MASK] movie with a [MASK] ending" --top-k 10

Prints, for each [MASK], the top-k words with their probabilities.
"""

import argparse

from mha_project.errors import UserError

from entry import fail, import_tensorflow_quietly  # scripts/entry.py: an error as one line and an exit status


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dir", help="a run directory trained with pretrain=mlm")
    parser.add_argument("text", help="a sentence with [MASK] where a word should be predicted")
    parser.add_argument("--top-k", type=int, default=5, help="words listed per [MASK] (default 5)")
    args = parser.parse_args()
    if args.top_k < 1:
        fail(f"--top-k={args.top_k} is invalid: must be an integer >= 1")
    try:
        import_tensorflow_quietly()
        from mha_project.extras.pretraining.fill_mask import fill_mask_in_run

        filled = fill_mask_in_run(args.run_dir, args.text, top_k=args.top_k)
    except UserError as err:
        fail(str(err))
    asked = args.text.lower().count("[mask]")
    if len(filled) < asked:  # the others lie beyond the tokens the model reads
        print(
            f"notice: the text has {asked} [MASK]s; only the {len(filled)} within the run's data.seq_len tokens "
            "(as data.truncation keeps them) are filled"
        )
    for i, words in enumerate(filled, start=1):
        print(f"[MASK] {i}: " + "  ".join(f"{word} {p:.3f}" for word, p in words))


if __name__ == "__main__":
    main()
