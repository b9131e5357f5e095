"""A run's history.csv (one row per validation, written by Keras's CSVLogger): reading it, trimming
it to the epochs a resume will not train again, and the time a run took to reach a validation accuracy."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from mha_project.errors import UserError
from mha_project.run_dir import check_run_dir


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


def steady_examples_per_second(run_dir) -> float | None:
    """A finished run's training examples/s over its epochs after the first (which also traces or compiles
    the step), from history.csv's ``elapsed_seconds`` and metrics.json; None without two epochs to compare."""
    run_dir = Path(run_dir)
    rows = read_history(run_dir / "history.csv")
    if len(rows) < 2 or not (run_dir / "metrics.json").exists():
        return None
    elapsed = [float(row["elapsed_seconds"]) for row in rows]
    examples = json.loads((run_dir / "metrics.json").read_text())["train_examples"]
    return examples * (len(elapsed) - 1) / (elapsed[-1] - elapsed[0])


def backed_up_epochs(backup_dir: Path) -> int:
    """Epochs completed according to BackupAndRestore's metadata (0 when there is no backup)."""
    try:
        return int(json.loads((Path(backup_dir) / "training_metadata.json").read_text())["epoch"])
    except (OSError, ValueError, KeyError, TypeError):
        return 0


def time_to_accuracy(run_dir, target: float) -> dict:
    """When a finished run first reached ``val_accuracy >= target``, from its history.csv.

    ``elapsed_seconds`` counts from the start of ``fit`` and includes each epoch's validation, so two
    runs compare by wall time to the same validation accuracy. Resolution is one epoch.
    """
    run_dir = check_run_dir(run_dir)
    if not (run_dir / "history.csv").is_file():
        raise UserError(f"{run_dir} has no history.csv: time to accuracy is read from its per-epoch rows")
    rows = read_history(run_dir / "history.csv")
    if not rows or "elapsed_seconds" not in rows[0]:
        raise UserError(f"{run_dir}/history.csv has no elapsed_seconds column (written by runs since 2026-11-29)")
    metrics = json.loads((run_dir / "metrics.json").read_text())
    reached = next((r for r in rows if float(r["val_accuracy"]) >= target), None)
    return {
        "run_dir": str(run_dir),
        "target_val_accuracy": target,
        "reached_at_epoch": _data_epochs(reached) if reached else None,
        "seconds_to_target": float(reached["elapsed_seconds"]) if reached else None,
        "best_val_accuracy": metrics.get("best_val_accuracy"),
        "test_accuracy": metrics.get("test_accuracy"),
        "train_examples_per_second": metrics.get("train_examples_per_second"),
        "epochs_run": metrics.get("epochs_run"),
    }


def _data_epochs(row: dict):
    """Passes over the training data at this history row (fractional with trainer.validations_per_epoch > 1)."""
    if row.get("data_epochs") not in (None, ""):
        value = float(row["data_epochs"])
        return int(value) if value.is_integer() else value
    return int(row["epoch"])
