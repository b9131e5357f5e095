"""Make a bigger folder dataset from one in the aclImdb layout, to measure memory as the data grows.

    python scripts/scale_folder_dataset.py /tmp/aclImdb /tmp/imdb_x16 --copies 16   # 25k -> 400k training texts

Copy 0 of every training text is the text itself; copy k > 0 is the same words in a seeded random order
(so copies are not duplicates for the vocabulary or the cache). test/ is linked, not copied.
"""

import argparse
import os
import random
from pathlib import Path

from entry import fail  # scripts/entry.py: an error as one line and an exit status


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("source", help="DIR/train/<class>/*.txt and DIR/test/<class>/*.txt")
    parser.add_argument("target", help="where to write the scaled dataset (must not exist)")
    parser.add_argument("--copies", type=int, default=4, metavar="N", help="training texts are multiplied by N")
    args = parser.parse_args()
    source, target = Path(args.source), Path(args.target)
    if args.copies < 1:
        fail(f"--copies={args.copies} is invalid: must be an integer >= 1")
    if not (source / "train").is_dir() or not (source / "test").is_dir():
        fail(f"{source} has no train/ and test/ folders")
    if target.exists():
        fail(f"{target} exists; give a new folder")
    classes = sorted(d.name for d in (source / "test").iterdir() if d.is_dir() and (source / "train" / d.name).is_dir())
    target.mkdir(parents=True)
    os.symlink((source / "test").resolve(), target / "test")
    rng = random.Random(0)
    written = 0
    for name in classes:
        out = target / "train" / name
        out.mkdir(parents=True)
        for path in sorted((source / "train" / name).glob("*.txt")):
            words = path.read_text(encoding="utf-8", errors="replace").split()
            for k in range(args.copies):
                if k:
                    rng.shuffle(words)
                (out / f"{k}_{path.name}").write_text(" ".join(words), encoding="utf-8")
                written += 1
    print(f"wrote {written} training texts in {len(classes)} classes to {target}/train; test/ links to {source}/test")


if __name__ == "__main__":
    main()
