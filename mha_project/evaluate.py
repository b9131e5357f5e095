"""Re-evaluate a saved run on the same test split it was tested on at the end of training."""

from __future__ import annotations

from mha_project.data import load_dataset, make_pipeline
from mha_project.run import load_run


def evaluate_run(run_dir) -> dict:
    run = load_run(run_dir)
    data = load_dataset(run.cfg.data, int(run.cfg.seed))
    test_ds = make_pipeline(
        data.test_texts,
        data.test_labels,
        run.vectorizer,
        run.seq_len,
        int(run.cfg.trainer.batch_size),
        shuffle=False,
        seed=int(run.cfg.seed),
        bucketing=bool(run.cfg.data.bucketing),
        bucket_width=run.cfg.data.get("bucket_width"),
    )
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
