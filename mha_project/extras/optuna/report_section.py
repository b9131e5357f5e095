"""The sweep report's section on an Optuna study (``scripts/sweep_report.py`` adds it to a sweep that has one)."""

from __future__ import annotations

import csv
import io
from pathlib import Path

from mha_project.atomic import write_text_atomic
from mha_project.attention.plots import plt, save_figure
from mha_project.extras.optuna.studies import import_optuna, make_storage, read_study_pointer
from mha_project.extras.sweep_report.tables import cell, markdown, shown

MIN_TRIALS_FOR_IMPORTANCES = 10  # fANOVA's ranking means little on fewer complete trials


def study_report(sweep_dir: Path) -> dict | None:
    """The Optuna study a sweep filled (``optuna_study.json`` in the sweep dir names it): every trial's
    state, value and parameters (``study.csv``), the best trial, and ``optuna.importance``'s parameter
    importances (``importances.png``); None for a sweep without a study."""
    pointer = read_study_pointer(sweep_dir)
    if pointer is None:
        return None
    optuna = import_optuna()
    study = optuna.load_study(
        study_name=pointer["study_name"], storage=make_storage(pointer["storage"], heartbeat=False)
    )
    trials = study.get_trials(deepcopy=False)
    names = sorted({name for t in trials for name in t.params})
    header = ["trial", "state", "value", "validations", *names, "run_dir"]
    rows = [
        [
            str(t.number),
            t.state.name.lower(),
            cell(t.value),
            str(len(t.intermediate_values)),
            *[shown(t.params[name]) if name in t.params else "" for name in names],
            str(Path(t.user_attrs.get("sweep_dir", "")) / f"trial_{t.number}"),
        ]
        for t in trials
    ]
    counts = {}
    for t in trials:
        counts[t.state.name.lower()] = counts.get(t.state.name.lower(), 0) + 1
    text = f"## Optuna study `{pointer['study_name']}` ({', '.join(f'{n} {s}' for s, n in counts.items())})\n\n"
    complete = [t for t in trials if t.state == optuna.trial.TrialState.COMPLETE]
    importances = {}
    if complete:
        best = study.best_trial
        text += (
            f"Best: trial {best.number}, {cell(best.value)} with "
            + " ".join(f"{k}={shown(v)}" for k, v in best.params.items())
            + "\n\n"
        )
        constant = sorted(n for n in names if len({repr(t.params.get(n)) for t in complete}) == 1)
        if len(complete) < MIN_TRIALS_FOR_IMPORTANCES:
            text += (
                f"Importances: not computed from {len(complete)} complete trial(s); fANOVA needs many trials that "
                f"vary each parameter (at least {MIN_TRIALS_FOR_IMPORTANCES} here) before its ranking means much.\n\n"
            )
        else:
            try:
                importances = optuna.importance.get_param_importances(study)
            except (RuntimeError, ValueError) as err:  # parameters that never varied, and the like
                text += f"Importances: not computed ({err}).\n\n"
            if importances and constant:
                text += (
                    f"Importances: {', '.join(constant)} never varied among the complete trials: 0 by construction.\n\n"
                )
    if importances:
        text += markdown(["parameter", "importance"], [[k, f"{v:.3f}"] for k, v in importances.items()]) + "\n"
        fig, ax = plt.subplots(figsize=(5, 0.5 + 0.4 * len(importances)))
        ax.barh(list(importances)[::-1], list(importances.values())[::-1])
        ax.set_xlabel("importance (fANOVA, optuna.importance)")
        fig.tight_layout()
        save_figure(fig, sweep_dir / "importances.png")
    text += markdown(header, rows)
    buffer = io.StringIO()
    csv.writer(buffer).writerows([header, *rows])
    write_text_atomic(sweep_dir / "study.csv", buffer.getvalue())
    return {"markdown": text, "counts": counts, "importances": importances, "trials": len(trials)}
