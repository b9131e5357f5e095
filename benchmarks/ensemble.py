"""What two finished runs get together: their test probabilities averaged (docs/ngrams.md).

    python benchmarks/ensemble.py RUN_A RUN_B

Both runs must have recorded the same test split (metrics.json's data_fingerprint). Prints one JSON object: each run's
test accuracy, the plain average's, and the best over the weights 0.1 ... 0.9 given to RUN_A. That best is
picked on the test split itself: an upper bound on what mixing the two runs' answers can reach, not a
result (the plain average is the honest figure).
"""

from __future__ import annotations

import json
import sys

import numpy as np

WEIGHTS = [round(0.1 * k, 1) for k in range(1, 10)]


def probabilities(run, texts, batch: int = 500) -> np.ndarray:
    rows = [run.model.predict(run.token_ids(texts[i : i + batch]), verbose=0) for i in range(0, len(texts), batch)]
    return np.concatenate(rows)


def main() -> None:
    if len(sys.argv) != 3:
        sys.exit("usage: python benchmarks/ensemble.py RUN_A RUN_B")
    from hydra.utils import instantiate

    from mha_project.extras.analysis.runs import load_run

    runs = [load_run(path) for path in sys.argv[1:]]
    splits = [run.metrics.get("data_fingerprint", {}).get("test") for run in runs]
    if None in splits or splits[0] != splits[1]:
        sys.exit(f"error: the two runs' recorded test splits differ or are missing ({splits[0]} vs {splits[1]})")
    data = instantiate(runs[0].cfg.data).splits(runs[0].cfg.seed)
    texts, labels = list(data.test_texts), np.asarray(data.test_labels)
    a, b = (probabilities(run, texts) for run in runs)

    def accuracy(probs) -> float:
        return float((probs.argmax(1) == labels).mean())

    mixed = {w: accuracy(w * a + (1 - w) * b) for w in WEIGHTS}
    best = max(mixed, key=mixed.get)
    print(
        json.dumps(
            {
                "runs": sys.argv[1:],
                "test_accuracy": [accuracy(a), accuracy(b)],
                "average": mixed[0.5],
                "best_weight_on_test": {"weight_a": best, "test_accuracy": mixed[best]},
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
