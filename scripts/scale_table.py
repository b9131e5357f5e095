"""Make a large table (CSV, JSON lines or Parquet) from a folder dataset in the aclImdb layout, to measure
data=table and scripts/predict.py as the rows grow.

    python scripts/scale_table.py /tmp/aclImdb /tmp/imdb_100k.csv --rows 100000
    python scripts/scale_table.py /tmp/aclImdb /tmp/imdb_1m.csv --rows 1000000

Columns text, label. Row i is training text i % n (n = the folder's training texts), its words in a seeded
random order from the second copy on, so copies are not duplicates for the vocabulary.
"""

import argparse
import random
from pathlib import Path

from entry import fail  # scripts/entry.py: an error as one line and an exit status


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("source", help="DIR/train/<class>/*.txt")
    parser.add_argument("target", help="the table to write (.csv, .jsonl or .parquet; must not exist)")
    parser.add_argument("--rows", type=int, default=100_000)
    args = parser.parse_args()
    import pandas as pd

    source, target = Path(args.source), Path(args.target)
    if target.exists():
        fail(f"{target} exists; give a new file")
    if not target.parent.is_dir():
        fail(f"{target.parent} is no folder: create it first, or give a table in an existing folder")
    if not (source / "train").is_dir():
        fail(f"{source}/train is no folder: give a folder dataset (DIR/train/<class>/*.txt)")
    texts, labels = [], []
    for folder in sorted(p for p in (source / "train").iterdir() if p.is_dir() and p.name != "unsup"):
        for path in sorted(folder.glob("*.txt")):
            texts.append(path.read_text(encoding="utf-8", errors="replace"))
            labels.append(folder.name)
    if not texts:
        fail(f"{source}/train holds no <class>/*.txt")
    rng = random.Random(0)
    rows = []
    for i in range(args.rows):
        text = texts[i % len(texts)]
        if i >= len(texts):
            words = text.split()
            rng.shuffle(words)
            text = " ".join(words)
        rows.append(text)
    frame = pd.DataFrame({"text": rows, "label": [labels[i % len(texts)] for i in range(args.rows)]})
    try:
        if target.suffix == ".parquet":
            frame.to_parquet(target)
        elif target.suffix == ".jsonl":
            frame.to_json(target, orient="records", lines=True)
        else:
            frame.to_csv(target, index=False)
    except OSError as err:
        target.unlink(missing_ok=True)  # a table cut short is no table; this command made it
        fail(f"{target} could not be written: {err.strerror or err}", code=1)
    print(f"wrote {len(frame)} rows to {target}")


if __name__ == "__main__":
    main()
