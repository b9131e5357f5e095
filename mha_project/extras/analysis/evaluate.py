"""Re-evaluate a saved run on the same test split it was tested on at the end of training."""

from __future__ import annotations

from mha_project.extras.analysis.runs import build_recorded, load_run


def evaluate_run(run_dir) -> dict:
    run = load_run(run_dir)
    data = run.splits()
    test_ds = run.batches(data.test_texts, data.test_labels)
    run.model.compile(loss=build_recorded(run.cfg.loss), metrics=["accuracy"])  # the loss it trained with
    loss, accuracy = run.model.evaluate(test_ds, verbose=0)
    return {
        "data_changed": data_changes(run.metrics.get("data_fingerprint"), data.fingerprints()),
        "run_dir": str(run.path),
        "dataset": data.name,
        "test_examples": len(data.test_texts),
        "test_accuracy": float(accuracy),
        "test_loss": float(loss),
        "recorded_test_accuracy": run.metrics["test_accuracy"],
        "recorded_test_loss": run.metrics["test_loss"],
    }


def data_changes(recorded: dict | None, now: dict) -> list[str]:
    """One line per split whose texts differ from those the run recorded."""
    changes = []
    for split, then in (recorded or {}).items():
        if now.get(split) != then:
            count = now.get(split, {}).get("count")
            changes.append(
                f"the {split} split differs from the one this run recorded ({count} texts now, {then['count']} "
                "then, or the same number of other files): its accuracy is not comparable with the recorded one"
            )
    return changes
