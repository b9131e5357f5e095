"""Re-evaluate a saved run on the same test split it was tested on at the end of training."""

from __future__ import annotations

from mha_project.data import load_dataset, pipeline_from_cfg
from mha_project.run import load_run


def evaluate_run(run_dir) -> dict:
    run = load_run(run_dir)
    data = load_dataset(run.cfg.data, int(run.cfg.seed))
    test_ds = pipeline_from_cfg(run.cfg, data.test_texts, data.test_labels, run.vectorizer, shuffle=False)
    run.model.compile(loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    loss, accuracy = run.model.evaluate(test_ds, verbose=0)
    return {
        "run_dir": str(run.path),
        "dataset": data.name,
        "test_examples": len(data.test_texts),
        "test_accuracy": float(accuracy),
        "test_loss": float(loss),
        "recorded_test_accuracy": run.metrics["test_accuracy"],
        "recorded_test_loss": run.metrics["test_loss"],
    }
