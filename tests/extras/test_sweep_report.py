"""The sweep report: one row per job, means over seeds, the plot, damaged and unfinished jobs."""

import csv
import json
import shutil
from pathlib import Path

import pytest

from conftest import run_script
from mha_project.extras.sweep_report.report import collect_jobs


@pytest.mark.slow
def test_a_finished_sweep_names_its_report_as_the_next_step(sweep_dir):
    last = (sweep_dir.parent / "stdout.txt").read_text().strip().splitlines()[-1]
    assert last.startswith(f"next: python scripts/sweep_report.py {sweep_dir}")


@pytest.mark.slow
def test_sweep_report(sweep_dir, tmp_path):
    sweep_dir = Path(shutil.copytree(sweep_dir, tmp_path / "s"))  # the shared sweep stays as it was made
    unfinished = sweep_dir / "7" / ".hydra"  # a job that was killed before writing anything
    unfinished.mkdir(parents=True)
    (unfinished / "overrides.yaml").write_text("- heads=7\n")
    result = run_script("sweep_report.py", str(sweep_dir))
    assert result.returncode == 0, result.stderr
    with open(sweep_dir / "report.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [r["heads"] for r in rows][:2] in (["1", "2"], ["2", "1"])
    first, second = rows[0], rows[1]
    assert float(first["best_val_accuracy"]) >= float(second["best_val_accuracy"])  # sorted by validation accuracy
    status = {r["heads"]: (r["status"], r["reason"]) for r in rows}
    assert status["0"][0] == "failed" and "must be an integer >= 1" in status["0"][1]
    assert status["7"][0] == "unfinished"
    report = (sweep_dir / "report.md").read_text()
    assert "| job | heads |" in report and "debug=tiny" in report  # swept column; fixed values listed once
    assert (sweep_dir / "report.png").read_bytes()[:4] == b"\x89PNG"
    assert "4 jobs, 2 failed or unfinished" in result.stdout


def fake_job(sweep: Path, num: int, overrides: list[str], val: float, test: float, seconds: float = 10.0, **extra):
    job = sweep / str(num)
    (job / ".hydra").mkdir(parents=True)
    (job / ".hydra" / "overrides.yaml").write_text("".join(f"- {o}\n" for o in overrides))
    metrics = {
        "best_val_accuracy": val,
        "test_accuracy": test,
        "params": 100,
        "train_seconds": seconds,
        "epochs_run": 2,
        **extra,
    }
    (job / "metrics.json").write_text(json.dumps(metrics))
    return job


def test_report_means_over_seeds(tmp_path):
    """Two seeds per configuration: report_by_config.csv holds one row per (heads, key_dim) with means."""
    from mha_project.extras.sweep_report.report import write_report

    values = {(1, 16): (0.70, 0.80), (1, 64): (0.74, 0.76), (4, 16): (0.60, 0.62), (4, 64): (0.90, 0.70)}
    num = 0
    for (heads, key_dim), tests in values.items():
        for seed, test in zip((1, 2), tests):
            fake_job(tmp_path, num, [f"seed={seed}", f"heads={heads}", f"key_dim={key_dim}"], val=test, test=test)
            num += 1
    result = write_report(tmp_path)
    with open(tmp_path / "report_by_config.csv", newline="") as f:
        rows = {(r["heads"], r["key_dim"]): r for r in csv.DictReader(f)}
    assert set(rows) == {("1", "16"), ("1", "64"), ("4", "16"), ("4", "64")}
    assert "seed" not in next(iter(rows.values()))
    assert float(rows[("1", "16")]["test_accuracy_mean"]) == pytest.approx(0.75)
    assert float(rows[("4", "64")]["test_accuracy_min"]) == pytest.approx(0.70)
    assert float(rows[("4", "64")]["test_accuracy_max"]) == pytest.approx(0.90)
    assert rows[("4", "16")]["seeds"] == "2"
    assert result["markdown"].startswith("| heads | key_dim | seeds |")
    assert (tmp_path / "report.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize("seeds", [1, 2])
def test_report_plot_keeps_coinciding_lines_visible_and_shows_the_majority_class(tmp_path, seeds):
    # A sweep stuck at the majority class: its flat lines stay visible (not on the plot's edges, key_dim=4 not
    # hidden under key_dim=8), and a title speaks of seeds only when there are several.
    from mha_project.extras.sweep_report.report import collect_jobs, sweep_figure

    num = 0
    for heads in (1, 2):
        for key_dim in (4, 8):
            for seed in range(seeds):
                overrides = [f"heads={heads}", f"key_dim={key_dim}", f"seed={seed}"]
                fake_job(
                    tmp_path,
                    num,
                    overrides,
                    0.6125,
                    0.6313,
                    majority_val_accuracy=0.6125,
                    majority_test_accuracy=0.6313,
                )
                num += 1
    fig = sweep_figure(collect_jobs(tmp_path))
    for ax in fig.axes:
        lines = {line.get_label(): line for line in ax.get_lines()}
        assert {"key_dim=4", "key_dim=8", "majority class"} <= set(lines)
        four, eight = lines["key_dim=4"], lines["key_dim=8"]
        assert (four.get_marker(), four.get_linestyle()) != (eight.get_marker(), eight.get_linestyle())
        low, high = ax.get_ylim()
        y = four.get_ydata()[0]
        assert low < y - 0.1 * (high - low) and y + 0.1 * (high - low) < high  # not on an edge
        assert ("over seeds" in ax.get_title()) == (seeds > 1)


def test_the_report_band_names_every_swept_value_it_pools(tmp_path):
    from mha_project.extras.sweep_report.report import collect_jobs, sweep_figure

    for num, (heads, dropout) in enumerate([(1, 0.1), (1, 0.3005575058716044), (2, 0.1), (2, 0.3)]):
        fake_job(tmp_path, num, [f"heads={heads}", "key_dim=8", f"dropout={dropout}", "seed=0"], 0.7, 0.7)
    titles = [ax.get_title() for ax in sweep_figure(collect_jobs(tmp_path)).axes]
    assert all("band = min..max over dropout" in title for title in titles), titles


def test_report_without_repeated_seeds_has_no_summary(tmp_path):
    from mha_project.extras.sweep_report.report import write_report

    fake_job(tmp_path, 0, ["heads=1"], 0.7, 0.7)
    fake_job(tmp_path, 1, ["heads=2"], 0.8, 0.8)
    result = write_report(tmp_path)
    assert not (tmp_path / "report_by_config.csv").exists()
    assert result["markdown"].startswith("| job | heads |")


def test_report_keeps_going_past_a_damaged_metrics_file(tmp_path):
    fake_job(tmp_path, 0, ["heads=1"], 0.7, 0.7)
    fake_job(tmp_path, 1, ["heads=2"], 0.8, 0.8)
    (tmp_path / "1" / "metrics.json").write_text("{garbage")
    jobs = {j["job"]: j for j in collect_jobs(tmp_path)}
    assert jobs["0"]["status"] == "finished" and jobs["0"]["test_accuracy"] == 0.7
    assert jobs["1"]["status"] == "damaged" and "metrics.json unreadable" in jobs["1"]["reason"]


def test_report_by_config_adds_head_entropy_where_head_patterns_ran(tmp_path):
    from mha_project.extras.sweep_report.report import write_report

    for num, (seed, entropies) in enumerate([(1, [0.2, 0.6]), (2, [0.4, 0.8])]):
        job = fake_job(tmp_path, num, ["heads=2", f"seed={seed}"], 0.7, 0.7)
        (job / "head_patterns").mkdir()
        heads = [{"normalized_entropy": e} for e in entropies]
        (job / "head_patterns" / "head_patterns.json").write_text(json.dumps({"heads": heads}))
    write_report(tmp_path)
    with open(tmp_path / "report_by_config.csv", newline="") as f:
        (row,) = list(csv.DictReader(f))
    assert float(row["head_entropy_min_mean"]) == pytest.approx(0.3)  # mean over seeds of (0.2, 0.4)
    assert float(row["head_entropy_mean_mean"]) == pytest.approx(0.5)  # mean over seeds of (0.4, 0.6)
