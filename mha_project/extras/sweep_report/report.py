"""Sweep report: one row per job of a Hydra multirun directory, as Markdown, CSV and a plot; for an Optuna
sweep also its study: every trial's state and value, the best trial and the hyper-parameters' importances."""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path

import numpy as np
import yaml

from mha_project.atomic import write_text_atomic
from mha_project.attention.plots import plt, save_figure
from mha_project.errors import UserError
from mha_project.extras.sweep_report.tables import cell, markdown, shown

# Fewer complete trials than this: the report gives no parameter importances (fANOVA on a handful of trials
# ranks noise).
METRIC_COLUMNS = ("best_val_accuracy", "test_accuracy", "params", "train_seconds", "epochs_run")
# Always predicting the training set's majority class: the line a sweep that learned nothing sits on.
MAJORITY = {"best_val_accuracy": "majority_val_accuracy", "test_accuracy": "majority_test_accuracy"}


def _head_entropy(job_dir: Path) -> dict:
    """min / mean normalised entropy over the job's heads, where scripts/head_patterns.py has been run."""
    path = job_dir / "head_patterns" / "head_patterns.json"
    try:
        values = [h["normalized_entropy"] for h in json.loads(path.read_text())["heads"]]
    except (OSError, ValueError, KeyError, TypeError):
        return {}
    return {"head_entropy_min": min(values), "head_entropy_mean": sum(values) / len(values)} if values else {}


def collect_jobs(sweep_dir) -> list[dict]:
    """Every job folder (one with .hydra/) under ``sweep_dir``: its overrides, metrics and status."""
    sweep_dir = Path(sweep_dir)
    if not sweep_dir.is_dir():
        raise UserError(f"sweep dir {sweep_dir} does not exist or is not a directory")
    jobs = []
    # A job that failed its checks has failure.json (with its overrides) but no .hydra/: train() writes
    # .hydra/ only once a run's settings are accepted.
    job_dirs = {p.parent for pattern in ("*/.hydra", "*/failure.json") for p in sweep_dir.glob(pattern)}
    for job_dir in sorted(job_dirs, key=lambda p: _job_sort_key(p.name)):
        metrics_file, failure_file = job_dir / "metrics.json", job_dir / "failure.json"
        if (job_dir / ".hydra" / "overrides.yaml").exists():
            overrides = _read_overrides(job_dir / ".hydra" / "overrides.yaml")
        else:
            overrides = _parse_overrides(json.loads(failure_file.read_text()).get("overrides") or [])
        row = {"job": job_dir.name, "overrides": overrides, "status": "finished", "reason": ""}
        if metrics_file.exists():
            try:
                metrics = json.loads(metrics_file.read_text())
                row.update({k: metrics.get(k) for k in (*METRIC_COLUMNS, *MAJORITY.values())})
                if metrics.get("pruned_at_epoch") is not None:  # an Optuna trial its pruner stopped
                    row.update(status="pruned", reason=f"pruned after epoch {metrics['pruned_at_epoch']}")
                row.update(_head_entropy(job_dir))
            except (ValueError, AttributeError) as err:  # one damaged job must not hide the others
                row.update(status="damaged", reason=f"metrics.json unreadable: {err}")
        elif failure_file.exists():
            row.update(status="failed", reason=json.loads(failure_file.read_text()).get("reason", ""))
        else:
            row.update(status="unfinished", reason="no metrics.json (still running, or killed)")
        jobs.append(row)
    if not jobs:
        raise UserError(
            f"{sweep_dir} holds no Hydra jobs (expected numbered folders with .hydra/ inside, "
            "as written by python scripts/train.py -m ...)"
        )
    return jobs


def swept_keys(jobs: list[dict]) -> list[str]:
    """Override keys whose value differs between jobs (all keys for a one-job sweep)."""
    keys: list[str] = []
    for job in jobs:
        for key in job["overrides"]:
            if key not in keys:
                keys.append(key)
    varying = [k for k in keys if len({job["overrides"][k] for job in jobs if k in job["overrides"]}) > 1]
    return varying if len(jobs) > 1 else keys


def fixed_overrides(jobs: list[dict]) -> dict:
    swept = set(swept_keys(jobs))
    return {k: v for k, v in jobs[0]["overrides"].items() if k not in swept}


def sort_jobs(jobs: list[dict]) -> list[dict]:
    def key(job):
        value = job.get("best_val_accuracy")
        return (job["status"] not in ("finished", "pruned"), -(value if isinstance(value, (int, float)) else -1))

    return sorted(jobs, key=key)


def to_table(jobs: list[dict]) -> tuple[list[str], list[list[str]]]:
    keys = swept_keys(jobs)
    header = ["job", *keys, *METRIC_COLUMNS, "status", "reason"]
    rows = []
    for job in sort_jobs(jobs):
        rows.append(
            [
                job["job"],
                *[_override_shown(job["overrides"].get(k, "")) for k in keys],
                *[cell(job.get(c)) for c in METRIC_COLUMNS],
                job["status"],
                job["reason"],
            ]
        )
    return header, rows


def seed_summary(jobs: list[dict], seed_key: str = "seed") -> tuple[list[str], list[list[str]]] | None:
    """Mean over seeds of every configuration that ran with more than one seed; None if none did.

    One seed's accuracy on a few hundred validation examples moves by a point or two, so a sweep that
    repeats seeds is read by its means and spreads, not by its single best job.
    """
    keys = [k for k in swept_keys(jobs) if k != seed_key]
    groups: dict = {}
    for job in jobs:
        if job["status"] == "finished":
            groups.setdefault(tuple(job["overrides"].get(k, "") for k in keys), []).append(job)
    if not any(len(g) > 1 for g in groups.values()):
        return None
    header = [
        *keys,
        "seeds",
        "val_accuracy_mean",
        "test_accuracy_mean",
        "test_accuracy_min",
        "test_accuracy_max",
        "train_seconds_mean",
    ]
    # Head entropy columns where every job of the sweep has head_patterns.json (scripts/head_patterns.py).
    with_entropy = all("head_entropy_min" in j for g in groups.values() for j in g)
    if with_entropy:
        header += ["head_entropy_min_mean", "head_entropy_mean_mean"]
    rows = []
    for values, group in groups.items():
        val = [j["best_val_accuracy"] for j in group]
        test = [j["test_accuracy"] for j in group]
        rows.append(
            [
                *values,
                str(len(group)),
                cell(float(np.mean(val))),
                cell(float(np.mean(test))),
                cell(min(test)),
                cell(max(test)),
                cell(float(np.mean([j["train_seconds"] for j in group]))),
                *(
                    [cell(float(np.mean([j[k] for j in group]))) for k in ("head_entropy_min", "head_entropy_mean")]
                    if with_entropy
                    else []
                ),
            ]
        )
    rows.sort(key=lambda r: [_number(v) for v in r[: len(keys)]])
    return header, rows


MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
LINE_STYLES = ("-", "--", "-.", ":")


def plot(jobs: list[dict], path: Path, **options) -> bool:
    """``report.png`` (:func:`sweep_figure`); False when the sweep has nothing to plot."""
    fig = sweep_figure(jobs, **options)
    if fig is None:
        return False
    save_figure(fig, path)
    return True


def sweep_figure(
    jobs: list[dict],
    x_key: str = "heads",
    line_key: str = "key_dim",
    metrics: tuple[str, ...] = ("best_val_accuracy", "test_accuracy"),
):
    """Accuracy against heads, one line per key_dim (its own marker and dash, so lines that coincide stay
    visible), one panel per metric; the mean, with a min..max band when a point has several seeds; a
    dashed grey line at the majority-class accuracy."""
    finished = [j for j in jobs if j["status"] == "finished" and j.get(metrics[0]) is not None]
    if not finished or not any(x_key in j["overrides"] for j in finished):
        return None
    fig, axes = plt.subplots(1, len(metrics), figsize=(6 * len(metrics), 4), sharey=True, squeeze=False)
    for ax, metric in zip(axes[0], metrics):
        groups: dict = {}
        for job in finished:
            line = job["overrides"].get(line_key, "default")
            x = _number(job["overrides"].get(x_key))
            groups.setdefault(line, {}).setdefault(x, []).append(job[metric])
        several = any(len(v) > 1 for g in groups.values() for v in g.values())
        pooled = _pooled_keys(finished, (x_key, line_key))
        for k, line in enumerate(sorted(groups, key=_number)):
            xs = sorted(groups[line])
            values = [groups[line][x] for x in xs]
            style = dict(marker=MARKERS[k % len(MARKERS)], linestyle=LINE_STYLES[k % len(LINE_STYLES)])
            ax.plot(xs, [np.mean(v) for v in values], **style, markersize=7, alpha=0.85, label=f"{line_key}={line}")
            if several:
                ax.fill_between(xs, [min(v) for v in values], [max(v) for v in values], alpha=0.15)
        majority = [j.get(MAJORITY.get(metric, "")) for j in finished]
        if majority and all(m is not None for m in majority):
            ax.axhline(float(np.mean(majority)), color="grey", linestyle="--", linewidth=1, label="majority class")
        ax.set_xscale("log", base=2)
        ax.set_xticks(sorted({x for g in groups.values() for x in g}))
        ax.get_xaxis().set_major_formatter(plt.matplotlib.ticker.ScalarFormatter())
        ax.margins(y=0.25)  # flat lines sit inside the panel, not on its edges
        ax.set_xlabel(x_key)
        ax.set_ylabel(metric.replace("_", " "))
        over = " and ".join("seeds" if k == "seed" else k for k in pooled) or "repeats"
        band = f"; band = min..max over {over}" if several else ""
        ax.set_title(f"{metric.replace('_', ' ')} (mean{band})" if several else metric.replace("_", " "), fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def _pooled_keys(jobs: list[dict], plotted: tuple[str, ...]) -> list[str]:
    """The swept keys a point of the figure pools over (every swept key but the plotted ones), ``seed`` first."""
    keys = [k for k in swept_keys(jobs) if k not in plotted]
    return sorted(keys, key=lambda k: (k != "seed", k))


def write_report(sweep_dir, sections=()) -> dict:
    """report.md / .csv / .png of a sweep; ``sections``: more of it, each ``section(sweep_dir) -> {"markdown":
    ...} or None`` (an Optuna study's trials and importances: scripts/sweep_report.py adds it)."""
    sweep_dir = Path(sweep_dir)
    jobs = collect_jobs(sweep_dir)
    header, rows = to_table(jobs)
    text = markdown(header, rows)
    buffer = io.StringIO()
    csv.writer(buffer).writerows([header, *rows])
    fixed = " ".join(f"{k}={v}" for k, v in fixed_overrides(jobs).items())
    intro = f"Same in every job: `{fixed}`\n\n" if fixed else ""
    summary = seed_summary(jobs)
    if summary is not None:
        text = markdown(*summary) + "\n" + text
        intro += "Mean over seeds per configuration first (also in report_by_config.csv), then every job.\n\n"
        by_config = io.StringIO()
        csv.writer(by_config).writerows([summary[0], *summary[1]])
        write_text_atomic(sweep_dir / "report_by_config.csv", by_config.getvalue())
    write_text_atomic(sweep_dir / "report.csv", buffer.getvalue())
    found = [section for section in (add(sweep_dir) for add in sections) if section is not None]
    for section in found:
        text += "\n" + section["markdown"]
    write_text_atomic(sweep_dir / "report.md", f"# Sweep report: {sweep_dir.name}\n\n{intro}{text}")
    plotted = plot(jobs, sweep_dir / "report.png")
    return {"jobs": jobs, "markdown": text, "plot": plotted, "sections": found}


def _override_shown(value: str) -> str:
    """A swept value as tables show it: a float to 4 significant digits (``0.3005575058716044``: 0.3006)."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return str(value)
    return str(value) if number.is_integer() or "." not in str(value) else shown(number)


def _read_overrides(path: Path) -> dict:
    if not path.exists():
        return {}
    return _parse_overrides(yaml.safe_load(path.read_text()) or [])


def _parse_overrides(items: list) -> dict:
    overrides = {}
    for item in items:
        key, _, value = str(item).partition("=")
        if key.startswith(("hydra.", "hydra/", "experiment", "hparams_search")):
            continue
        overrides[key.lstrip("+~")] = value
    return overrides


def _job_sort_key(name: str):
    digits = name.rpartition("_")[2]  # 3, trial_3
    return (0, int(digits), name) if digits.isdigit() else (1, 0, name)


def _number(value):
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.inf
