"""train(cfg, run_dir) in-process, from configs composed the way scripts/train.py composes them."""

import csv
import json
from pathlib import Path

import keras
import pytest

from conftest import QUIET, compose_cfg
from mha_project.training.train import train


@pytest.mark.slow
def test_train_returns_what_it_records(tmp_path: Path):
    metrics = train(compose_cfg("debug=tiny", *QUIET), tmp_path / "run")
    assert metrics == json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["hparams"]["heads"] == 2 and metrics["epochs_run"] == 1
    assert json.loads((tmp_path / "run" / "run.json").read_text())["stage"] == "finished"


@pytest.mark.slow
def test_debug_overfit_drives_the_training_loss_to_about_zero(tmp_path: Path):
    train(compose_cfg("debug=overfit", *QUIET), tmp_path / "run")
    with open(tmp_path / "run" / "history.csv", newline="") as f:
        losses = [float(r["loss"]) for r in csv.DictReader(f)]
    assert losses[0] > 0.5 and losses[-1] < 0.05


@pytest.mark.slow
@pytest.mark.parametrize("precision", ["mixed_bfloat16", "mixed_float16"])
def test_mixed_precision_trains_and_keeps_float32_probabilities(tmp_path: Path, precision):
    run_dir = tmp_path / "run"
    metrics = train(compose_cfg("debug=tiny", *QUIET, f"trainer.precision={precision}"), run_dir)
    assert 0.0 <= metrics["test_accuracy"] <= 1.0 and metrics["test_loss"] == metrics["test_loss"]  # not NaN
    # The precision is the model's own dtype policy: the process's global policy is left as it was.
    assert keras.mixed_precision.global_policy().name == "float32"
    model = keras.saving.load_model(run_dir / "model.keras", safe_mode=True)
    assert model.backbone.get_layer("encoder_0").attention.compute_dtype == precision.split("_")[1]
    assert model.output.dtype == "float32"  # the softmax stays float32 under mixed precision


@pytest.mark.slow
def test_early_stopping_waits_for_the_end_of_the_warm_up(tmp_path: Path):
    cfg = compose_cfg(
        "debug=tiny",
        "epochs=12",
        "trainer.warmup_fraction=0.5",
        "trainer.early_stopping_patience=0",  # would stop at the first epoch that does not improve
        *QUIET,
        "logger.tensorboard=false",
    )
    assert train(cfg, tmp_path / "run")["epochs_run"] >= 7  # warm-up is epochs 1-6
