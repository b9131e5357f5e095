"""The timing extra: the first epoch whose validation accuracy reaches a target, and when (fractional with several
validations an epoch); steady speed."""

import json

from conftest import run_script
from mha_project.run_dir import RUN_FORMAT


def fake_run(path, val_accuracies, seconds):
    (path / ".hydra").mkdir(parents=True)
    (path / ".hydra" / "config.yaml").write_text("seed: 1\n")
    for name in ("model.keras", "vocab.txt"):
        (path / name).write_text("")
    (path / "run.json").write_text(json.dumps({"format": RUN_FORMAT}))
    rows = ["epoch,accuracy,elapsed_seconds,loss,val_accuracy,val_loss"]
    rows += [f"{i},0.9,{s},0.3,{v},0.4" for i, (v, s) in enumerate(zip(val_accuracies, seconds), start=1)]
    (path / "history.csv").write_text("\n".join(rows) + "\n")
    metrics = {
        "best_val_accuracy": max(val_accuracies),
        "test_accuracy": 0.85,
        "train_examples_per_second": 120.5,
        "epochs_run": len(val_accuracies),
    }
    (path / "metrics.json").write_text(json.dumps(metrics))
    return path


def test_first_epoch_reaching_the_target(tmp_path):
    from mha_project.extras.timing.measures import time_to_accuracy

    run = fake_run(tmp_path / "r", [0.80, 0.87, 0.86, 0.89], [50.0, 101.5, 150.0, 200.0])
    result = time_to_accuracy(run, 0.867)
    assert (result["reached_at_epoch"], result["seconds_to_target"]) == (2, 101.5)
    assert time_to_accuracy(run, 0.885)["seconds_to_target"] == 200.0
    never = time_to_accuracy(run, 0.95)
    assert never["reached_at_epoch"] is None and never["seconds_to_target"] is None


def test_cli_table_and_errors(tmp_path):
    fast = fake_run(tmp_path / "fast", [0.87, 0.88], [40.0, 80.0])
    slow = fake_run(tmp_path / "slow", [0.85, 0.87], [90.0, 180.0])
    result = run_script("time_to_accuracy.py", str(fast), str(slow), "--json")
    assert result.returncode == 0, result.stderr
    assert [r["seconds_to_target"] for r in json.loads(result.stdout)] == [40.0, 180.0]
    table = run_script("time_to_accuracy.py", str(fast), "--target", "0.99")
    assert table.returncode == 0 and "| never | never |" in table.stdout
    bad = run_script("time_to_accuracy.py", str(fast), "--target", "1.5")
    assert bad.returncode == 2 and "--target=1.5 is invalid" in bad.stderr and "Traceback" not in bad.stderr
    missing = run_script("time_to_accuracy.py", str(tmp_path / "nope"))
    assert missing.returncode == 2 and "does not exist" in missing.stderr and "Traceback" not in missing.stderr


def test_steady_examples_per_second_leaves_out_the_first_epoch(tmp_path):
    from mha_project.extras.timing.measures import steady_examples_per_second

    (tmp_path / "metrics.json").write_text(json.dumps({"train_examples": 100}))
    (tmp_path / "history.csv").write_text("epoch,elapsed_seconds\n1,10.0\n")
    assert steady_examples_per_second(tmp_path) is None  # one epoch: nothing after the first
    (tmp_path / "history.csv").write_text("epoch,elapsed_seconds\n1,10.0\n2,30.0\n3,50.0\n")
    assert steady_examples_per_second(tmp_path) == 5.0  # 2 epochs x 100 examples in 40 s
