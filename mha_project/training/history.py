"""A run's history.csv (one row per validation, written by Keras's CSVLogger): reading it, and trimming it to
the epochs a resume will not train again."""

from __future__ import annotations

import csv
import json
from pathlib import Path


def read_history(path: Path) -> list[dict]:
    if not Path(path).exists():
        return []
    with open(path, newline="") as f:
        return [row for row in csv.DictReader(f) if row.get("epoch", "").strip().isdigit()]


def trim_history(path: Path, epochs_done: int) -> list[dict]:
    """Keep history.csv's header and its rows of epochs 1..``epochs_done`` (epochs count from 1); return them.

    Rewritten in place (not renamed) because CSVLogger appends to the same file afterwards.
    """
    path = Path(path)
    if not path.exists():
        return []
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        fields = reader.fieldnames or []
        all_rows = [r for r in reader if r.get("epoch", "").strip().isdigit()]
    rows = [r for r in all_rows if int(r["epoch"]) <= epochs_done]
    if len(rows) != len(all_rows):
        with open(path, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=fields)
            writer.writeheader()
            writer.writerows(rows)
    return rows


def backed_up_epochs(backup_dir: Path) -> int:
    """Epochs completed according to BackupAndRestore's metadata (0 when there is no backup)."""
    try:
        return int(json.loads((Path(backup_dir) / "training_metadata.json").read_text())["epoch"])
    except (OSError, ValueError, KeyError, TypeError):
        return 0
