"""The table of docs/seed_advice.md "Where more heads are needed", from experiment=relations_heads sweeps:

    python scripts/train.py -m experiment=relations_heads hydra.sweep.dir=outputs/multirun/relations_l1
    python scripts/train.py -m experiment=relations_heads layers=2 hydra.sweep.dir=outputs/multirun/relations_l2
    python benchmarks/relations_table.py outputs/multirun/relations_l1 outputs/multirun/relations_l2

One row per sweep x task x heads, over the seeds: test accuracy (mean and lowest), validation accuracy after
epoch 2 (how fast it is learned), the first epoch whose validation accuracy reached 0.95, and the seconds of
training (the fit alone, from metrics.json). Reads each job's .hydra/config.yaml, metrics.json and history.csv.
"""

from __future__ import annotations

import csv
import json
import sys
from collections import defaultdict
from pathlib import Path

from omegaconf import OmegaConf


def job_rows(sweep: Path):
    for job in sorted(p for p in sweep.iterdir() if (p / "metrics.json").is_file()):
        cfg = OmegaConf.to_container(OmegaConf.load(job / ".hydra" / "config.yaml"), resolve=True)
        metrics = json.loads((job / "metrics.json").read_text())
        with open(job / "history.csv", newline="") as f:
            val = [float(r["val_accuracy"]) for r in csv.DictReader(f)]
        reached = next((i + 1 for i, v in enumerate(val) if v >= 0.95), None)
        backbone = cfg["model"]["backbone"]
        key = (backbone["num_layers"], cfg["data"]["task"], backbone["num_heads"], backbone["key_dim"])
        yield key, metrics["test_accuracy"], val[1] if len(val) > 1 else val[0], reached, metrics["train_seconds"]


def main(sweeps: list[str]) -> None:
    groups = defaultdict(list)
    for sweep in sweeps:
        for key, *values in job_rows(Path(sweep)):
            groups[key].append(values)
    columns = ["layers", "task", "heads × key_dim", "test accuracy: mean (lowest)", "val after epoch 2"]
    columns += ["epoch val ≥ 0.95", "seconds", "seeds"]
    print("| " + " | ".join(columns) + " |")
    print("|---|---|---|---|---|---|---|---|")
    for (layers, task, heads, key_dim), rows in sorted(groups.items()):
        test, after2, reached, seconds = zip(*rows)
        epochs = [r for r in reached if r is not None]
        epoch = f"{sum(epochs) / len(epochs):.1f}" if epochs else "never"
        if epochs and len(epochs) < len(rows):
            epoch += f" ({len(rows) - len(epochs)} never)"
        print(
            f"| {layers} | {task} | {heads} × {key_dim} | {sum(test) / len(test):.3f} ({min(test):.3f}) "
            f"| {sum(after2) / len(after2):.3f} | {epoch} | {sum(seconds) / len(seconds):.0f} | {len(rows)} |"
        )


if __name__ == "__main__":
    main(sys.argv[1:])
