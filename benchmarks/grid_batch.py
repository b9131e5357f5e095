"""Does the C grid (``model.ngram_branch.c=auto``) choose the same C on larger batches, and how much faster?
The run's own data, rule and bag, up to the choice; then the grid once per setting, in alternating rounds (the
machine's speed drifts), and no fit:

    python benchmarks/grid_batch.py --settings 0:0.01,256:0.03 --rounds 1 data=folder data.path=/tmp/aclImdb seed=1

A setting is ``batch_size:learning_rate`` (``0`` for the batch size: the run's own batches). The arguments after
the options are scripts/train.py overrides (after ``experiment=wide_deep``). Prints one JSON line per grid: the
setting, the C chosen, the seconds, each C's validation loss.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from hydra import compose, initialize_config_dir

ROOT = Path(__file__).resolve().parents[1]


class Chosen(Exception):
    """Raised once every grid has run: the run stops before its fit."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--settings", default="0:0.01,256:0.03", help="comma-separated")
    parser.add_argument("--rounds", type=int, default=1)
    args, overrides = parser.parse_known_args()
    from mha_project.extras.ngrams import classifier
    from mha_project.training.train import train

    settings = [(int(b) or None, float(lr)) for b, lr in (s.split(":") for s in args.settings.split(","))]
    choose_c = classifier.choose_c

    def every_setting(bag, batches, validation, objective, epochs, **_):
        # choose_c builds its grid from `bag` afresh each time: the rounds share only the adapted features
        for round_ in range(args.rounds):
            for batch_size, lr in settings:
                chosen = choose_c(bag, batches, validation, objective, epochs, batch_size, lr)
                print(json.dumps({
                    "round": round_, "batch_size": batch_size, "learning_rate": lr, "c": chosen["c"],
                    "seconds": chosen["seconds"], "val_loss": [round(v, 4) for v in chosen["val_loss"]],
                }), flush=True)  # fmt: skip
        raise Chosen

    classifier.choose_c = every_setting
    quiet = ["savedmodel.export=false", "head_view.html=false", "logger.attention.every_n_epochs=0"]
    with initialize_config_dir(str(ROOT / "configs"), version_base=None), tempfile.TemporaryDirectory() as tmp:
        cfg = compose("train", ["experiment=wide_deep", *quiet, *overrides])
        try:
            train(cfg, Path(tmp) / "run")
        except Chosen:
            pass


if __name__ == "__main__":
    main()
