"""Time to a validation accuracy and steady training speed, from a finished run's ``history.csv`` (its
``elapsed_seconds`` count training time since the run began, across resumes) and ``metrics.json``."""

from __future__ import annotations

import json
from pathlib import Path

from mha_project.errors import UserError
from mha_project.extras.analysis.finished import check_run_dir
from mha_project.training.fit import read_history


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
        raise UserError(f"{run_dir}/history.csv has no elapsed_seconds column: train the run again")
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
