"""Which C does ``model.ngram_branch.c=auto`` choose as the grid's bags train longer (``model.choice_epochs``)?
One run per value, the fit itself cut to one epoch (only the choice is read):

    python benchmarks/choice_epochs.py --epochs 2 6 data=table data.path=/tmp/wheel_datasets/news_outlets.csv \\
        data.label_column=outlet data.test_fraction=0.2 seed=1

The arguments after the options are scripts/train.py overrides (after ``experiment=wide_deep``). Prints one JSON
line per value: the C chosen, the grid's seconds, each C's validation loss and accuracy.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from hydra import compose, initialize_config_dir

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--epochs", type=int, nargs="+", default=[2, 6])
    args, overrides = parser.parse_known_args()
    from mha_project.training.train import train

    quiet = ["savedmodel.export=false", "head_view.html=false", "logger.attention.every_n_epochs=0"]
    short = ["epochs=1", "trainer.schedule_from_data.many_classes.epochs=1"]
    with initialize_config_dir(str(ROOT / "configs"), version_base=None), tempfile.TemporaryDirectory() as tmp:
        for epochs in args.epochs:
            # after the overrides: the long fit sets model.choice_epochs from the data, its own setting sets it here
            length = [f"model.choice_epochs={epochs}"]
            length.append(f"trainer.schedule_from_data.many_classes.choice_epochs={epochs}")
            cfg = compose("train", ["experiment=wide_deep", *quiet, *short, *overrides, *length])
            chosen = train(cfg, Path(tmp) / f"epochs_{epochs}")["chosen"]["ngram_c"]
            print(json.dumps({
                "choice_epochs": epochs, "c": chosen["c"], "seconds": chosen["seconds"],
                "val_loss": [round(v, 3) for v in chosen["val_loss"]],
                "val_accuracy": [round(v, 3) for v in chosen["val_accuracy"]],
            }), flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
