"""Would choosing the bag's fit on validation, as the linear anchors choose C, pick the better fit?

    python benchmarks/choose_by_validation.py outputs/runs/*    # finished runs of several fits and seeds

Reads each finished run directory given (``.hydra/config.yaml`` and ``metrics.json``), groups the runs that
differ only in the fit (``optimizer.ngram_lr``, ``trainer.epochs``, ``trainer.early_stopping_patience`` and the
bag's penalty) into one *setting* per dataset and model, and inside a setting pairs them by seed (a seed draws
the same splits for every fit). For each seed that every fit of its setting ran, it keeps the fit with the best
validation accuracy (a tie keeps the first fit in the order of the table) and prints one Markdown table: per
setting, each fit's mean test accuracy, the mean test accuracy of the fit chosen on validation, and how often
validation chose the fit that tested better.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from omegaconf import OmegaConf

from mha_project.extras.sweep_report.tables import markdown

FIT_KEYS = ("optimizer.ngram_lr", "trainer.epochs", "trainer.early_stopping_patience", "model.ngram_branch.c")


def model_name(cfg) -> str:
    """The model's class, and ``alone`` for a bag without the encoder (``model/backbone=none``)."""
    name = str(OmegaConf.select(cfg, "model._target_")).rpartition(".")[2]
    return name + (" alone" if OmegaConf.select(cfg, "model.backbone") is None else "")


def read_run(path: Path) -> dict | None:
    if not (path / "metrics.json").is_file():
        return None  # unfinished, or not a run directory
    cfg = OmegaConf.load(path / ".hydra" / "config.yaml")
    metrics = json.loads((path / "metrics.json").read_text())
    data = cfg.data
    setting = (data.name, str(data.get("path")), str(data.get("label_column")), model_name(cfg))
    fit = tuple(OmegaConf.select(cfg, key) for key in FIT_KEYS)
    return {"setting": setting, "fit": fit, "seed": cfg.seed, **metrics}


def choose(runs: list[dict]) -> list[dict]:
    rows = []
    for setting in sorted({r["setting"] for r in runs}, key=str):
        mine = [r for r in runs if r["setting"] == setting]
        fits = sorted({r["fit"] for r in mine}, key=str)
        by = {(r["fit"], r["seed"]): r for r in mine}
        seeds = sorted(s for s in {r["seed"] for r in mine} if all((f, s) in by for f in fits))
        if len(fits) < 2 or not seeds:
            continue
        chosen, right = [], 0
        for seed in seeds:
            candidates = [by[(f, seed)] for f in fits]
            picked = max(candidates, key=lambda r: r["best_val_accuracy"])  # max keeps the first of a tie
            chosen.append(picked["test_accuracy"])
            right += picked["test_accuracy"] == max(r["test_accuracy"] for r in candidates)
        mean = {f: sum(by[(f, s)]["test_accuracy"] for s in seeds) / len(seeds) for f in fits}
        rows.append(
            {"setting": setting, "seeds": seeds, "fits": mean, "chosen": sum(chosen) / len(seeds), "right": right}
        )
    return rows


def main() -> None:
    runs = [run for run in (read_run(Path(p)) for p in sys.argv[1:]) if run is not None]
    rows = choose(runs)
    if not rows:
        sys.exit("error: no setting has two fits with a seed in common among the finished runs given")
    header = ["data, branch", "seeds", "mean test of each fit (ngram_lr, epochs, patience, C)", "by val", "picked best"]
    table = []
    for row in rows:
        name, path, label, branch = row["setting"]
        where = name if path == "None" else f"{Path(path).stem} ({label})"
        fits = "; ".join(f"{fit}: {test:.3f}" for fit, test in row["fits"].items())
        seeds = len(row["seeds"])
        table.append([f"{where}, {branch}", str(seeds), fits, f"{row['chosen']:.3f}", f"{row['right']} of {seeds}"])
    print(markdown(header, table), end="")


if __name__ == "__main__":
    main()
