"""Benchmark script and tf.distribute (no timing thresholds: timings are noisy)."""

import json

import pytest

from conftest import TINY, run_script

pytestmark = pytest.mark.slow


def test_benchmark_prints_well_formed_json():
    overrides = [o for o in TINY if not o.startswith("epochs=")]
    result = run_script(
        "benchmark.py", "--epochs", "2", "--variant", "model.backbone.attention_dropout=0 batch_size=16", *overrides
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout)
    a, b = report["keras_io_style"]["examples_per_second"], report["project"]["examples_per_second"]
    assert a > 0 and b > 0
    assert report["ratio"] == pytest.approx(b / a, rel=1e-2)
    assert report["peak_rss_mb"]["after_project"] > 0
    # two interleaved rounds, each timing one epoch of (a) and one of (b)
    assert len(report["keras_io_style"]["seconds_per_epoch"]) == len(report["project"]["seconds_per_epoch"]) == 2
    assert len(report["ratio_per_round"]) == 2 and all(r > 0 for r in report["ratio_per_round"])
    variant = report["variants"]["model.backbone.attention_dropout=0 batch_size=16"]
    assert variant["examples_per_second"] > 0 and len(variant["ratio_to_project_per_round"]) == 2
    assert variant["ratio_to_project"] == pytest.approx(variant["examples_per_second"] / b, rel=1e-2)
    assert report["config"]["seq_len"] == 32 and report["config"]["model"]["backbone"]["num_heads"] == 2
    assert report["train_examples"] == 160
    # the padding bound: (a) computes seq_len tokens per text, (b) its bucket's edge (>= its real length)
    project = report["project"]
    assert project["mean_real_tokens_per_example"] <= project["mean_padded_tokens_per_example"] <= 32
    bound = report["padding_bound"]
    assert bound["tokens"] == pytest.approx(32 / project["mean_padded_tokens_per_example"], rel=1e-2)
    assert bound["attention_entries"] >= bound["tokens"] >= 1.0  # Jensen: E[T^2] >= E[T]^2


def test_time_to_accuracy_benchmark_prints_well_formed_json():
    # Target 0.01: both sides reach it after their first round, so the JSON has every field filled.
    result = run_script(
        "benchmark.py", "--time-to-accuracy", "0.01", *TINY, "epochs=2", "--round-fraction", "0.5", "--repeats", "2"
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout)
    recipe, project = report["keras_io_recipe"], report["project"]
    assert report["target_val_accuracy"] == 0.01 and report["round_fraction"] == 0.5
    for side in (recipe, project):
        assert side["epochs_to_target"] == 0.5 and side["rounds"] == 1  # stops at the target
        assert side["seconds_to_target"] == pytest.approx(side["train_seconds_per_round"][0], abs=0.01)
        assert len(side["val_accuracy_per_round"]) == side["rounds"] and 0.0 <= side["test_accuracy"] <= 1.0
        assert side["examples_per_second"] > 0
    assert report["ratio"] == pytest.approx(project["seconds_to_target"] / recipe["seconds_to_target"], rel=0.01)
    assert report["config"]["recipe"]["maxlen"] == 200 and report["config"]["recipe"]["mask"] is False
    assert report["config"]["project"]["seq_len"] == 32 and report["train_examples"] == 160
    # --repeats 2: the top level is the first race; "repeats" holds both, with the median of their ratios
    repeats = report["repeats"]
    assert repeats["n"] == 2 and len(repeats["ratio_per_repeat"]) == 2
    assert repeats["ratio_per_repeat"][0] == report["ratio"]
    assert repeats["ratio_median"] == pytest.approx(sum(repeats["ratio_per_repeat"]) / 2, abs=1e-3)
    for name, side in (("keras_io_recipe", recipe), ("project", project)):
        seconds = repeats["seconds_to_target_per_repeat"][name]
        assert len(seconds) == 2 and seconds[0] == side["seconds_to_target"] and seconds[1] > 0
        # the second race starts from fresh models and also stops at the target after its first round
        assert repeats["epochs_to_target_per_repeat"][name] == [0.5, 0.5]

    bad = run_script("benchmark.py", "--time-to-accuracy", "1.5", *TINY)
    assert bad.returncode == 2 and "--time-to-accuracy=1.5 is invalid" in bad.stderr
    bad = run_script("benchmark.py", "--time-to-accuracy", "0.8", "--repeats", "0", *TINY)
    assert bad.returncode == 2 and "--repeats=0 is invalid" in bad.stderr and "Traceback" not in bad.stderr


def test_benchmark_bad_variant_is_one_line():
    result = run_script("benchmark.py", "--variant", "trainer.precision=float8", "data.limit=50")
    assert result.returncode == 2 and "trainer.precision=float8" in result.stderr
    assert "Traceback" not in result.stderr
    result = run_script("benchmark.py", "--variant", "no_such_key=1", "data.limit=50")
    assert result.returncode == 2 and "no_such_key" in result.stderr and "Traceback" not in result.stderr


def test_memory_probe_reports_each_stage_for_texts_held_on_disk(tmp_path):
    from benchmarks.throughput import run_memory_probe
    from conftest import compose_cfg, write_folder_dataset

    root = write_folder_dataset(tmp_path / "d", per_class=40)
    cfg = compose_cfg(*TINY, "data=folder", f"data.path={root}", "data.vocab_sample=20")
    report = run_memory_probe(cfg, steps=3)
    assert report["texts_held_as"] == "TextFiles" and report["train_texts"] == 72  # 80 minus 10% validation
    peaks = list(report["peak_rss_mb"].values())
    assert peaks == sorted(peaks) and peaks[0] > 0  # a peak never goes down
    assert report["train_steps"] == 3 and report["train_examples_per_second"] > 0


def test_ensemble_of_a_run_with_itself_is_the_run_and_other_splits_are_refused(tiny_run, tmp_path, capsys, monkeypatch):
    import shutil

    from benchmarks import ensemble

    monkeypatch.setattr("sys.argv", ["ensemble.py", str(tiny_run), str(tiny_run)])
    ensemble.main()
    report = json.loads(capsys.readouterr().out)
    recorded = json.loads((tiny_run / "metrics.json").read_text())["test_accuracy"]
    assert report["test_accuracy"] == pytest.approx([recorded] * 2, abs=1e-6)
    assert report["average"] == pytest.approx(recorded, abs=1e-6)
    other = tmp_path / "other"
    shutil.copytree(tiny_run, other)
    metrics = json.loads((other / "metrics.json").read_text())
    metrics["data_fingerprint"]["test"]["sha256"] = "0" * 16
    (other / "metrics.json").write_text(json.dumps(metrics))
    monkeypatch.setattr("sys.argv", ["ensemble.py", str(tiny_run), str(other)])
    with pytest.raises(SystemExit, match="recorded test splits differ"):
        ensemble.main()
