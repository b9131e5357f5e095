"""End-to-end runs of the real command-line tools on a tiny model (marked slow)."""

import csv
import importlib.util
import io
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

from conftest import QUIET, TINY, run_script, train_tiny

pytestmark = pytest.mark.slow

METRIC_KEYS = {
    "test_accuracy",
    "test_loss",
    "best_val_accuracy",
    "epochs_run",
    "train_seconds",
    "train_examples_per_second",
    "params",
    "dataset",
    "num_classes",
    "class_names",
    "hparams",
}


def test_run_directory_is_complete(tiny_run: Path):
    metrics = json.loads((tiny_run / "metrics.json").read_text())
    assert METRIC_KEYS <= set(metrics)
    assert metrics["dataset"] == "fine_foods" and metrics["class_names"] == ["great", "other"]
    core = {
        "heads": 2,
        "key_dim": 8,
        "value_dim": 8,  # null in the config: the value Keras used
        "dropout": 0.3,
        "layers": 1,
        "embed_dim": 16,
        "ff_dim": 16,
        "seq_len": 32,
        "truncation": "head",
        "batch_size": 32,
        "lr": 0.005,
        "seed": 42,
        "epochs": 1,
        "dataset": "fine_foods",
        "embedding_norm": "layer_norm",
        "pooling": "mean",
        "local_conv": 0,
        # every other model option, by its own name (config.hparams_of reads them from the model's config)
        "activation": "gelu",
        "use_bias": True,
        "use_gate": False,
        "norm_first": False,
    }
    # the core's hyper-parameters, as the run's recorded config gives them, and nothing else
    from omegaconf import OmegaConf

    from mha_project.config import hparams_of

    assert {name: metrics["hparams"][name] for name in core} == core
    assert "sliding_window" not in metrics["hparams"]  # null (attend to every token) is no HParams value
    choices = OmegaConf.load(tiny_run / ".hydra" / "hydra.yaml").hydra.runtime.choices
    assert metrics["hparams"] == hparams_of(OmegaConf.load(tiny_run / ".hydra" / "config.yaml"), choices)
    assert metrics["hparams"]["debug"] == "tiny" and "callbacks" not in metrics["hparams"]  # none: not recorded
    assert 0.0 <= metrics["test_accuracy"] <= 1.0 and metrics["epochs_run"] == 1 and metrics["params"] > 0
    assert metrics["train_examples_per_second"] > 0 and metrics["test_examples"] == 160
    for name in (
        ".hydra/config.yaml",
        "model.keras",
        "vocab.txt",
        "history.csv",
        "checkpoints/best.weights.h5",
        "export/saved_model.pb",
    ):
        assert (tiny_run / name).exists(), name
    assert list((tiny_run / "tensorboard" / "train").glob("events.out.tfevents.*"))
    assert not (tiny_run / "backup").exists()  # BackupAndRestore cleans up after a finished run


def test_model_keras_leaves_the_optimizer_out_and_is_small(tiny_run: Path):
    import h5py

    with zipfile.ZipFile(tiny_run / "model.keras") as archive:
        config = json.loads(archive.read("config.json"))
        weights = h5py.File(io.BytesIO(archive.read("model.weights.h5")))
        assert "optimizer" not in weights  # resuming reads backup/, never model.keras
    assert config["class_name"] == "TextClassifier" and not config.get("compile_config")


def test_evaluate_reproduces_recorded_test_metrics(tiny_run: Path):
    result = run_script("evaluate.py", str(tiny_run))
    assert result.returncode == 0, result.stderr[-2000:]
    metrics = json.loads((tiny_run / "metrics.json").read_text())
    assert f"test accuracy: {metrics['test_accuracy']:.4f}" in result.stdout
    report = json.loads(result.stdout[: result.stdout.rindex("}") + 1])
    assert report["test_loss"] == pytest.approx(metrics["test_loss"], abs=1e-5)


def test_train_prints_run_dir_and_accuracy_last(tiny_run: Path):
    lines = (tiny_run.parent / "stdout.txt").read_text().strip().splitlines()
    at = next(i for i, line in enumerate(lines) if "[mha_project.training.train][INFO] - run dir: " in line)
    last = lines[at : at + 3]  # train's last lines: what the extras' callbacks add comes after
    assert last[0].endswith(f"[mha_project.training.train][INFO] - run dir: {tiny_run}")  # logged, so in train.log too
    metrics = json.loads((tiny_run / "metrics.json").read_text())
    assert f"[INFO] - test accuracy: {metrics['test_accuracy']:.4f}" in last[1]
    assert last[2].endswith("tested epoch 1's weights (the best val accuracy); trained its one epoch")
    assert f"test accuracy: {metrics['test_accuracy']:.4f}" in (tiny_run / "train.log").read_text()
    stdout = (tiny_run.parent / "stdout.txt").read_text()
    for step in (f"python scripts/evaluate.py {tiny_run}", f"python scripts/inspect_attention.py {tiny_run} "):
        assert step in stdout  # the next commands, with the real run path


@pytest.mark.subprocess
def test_command_line_shortcuts_reach_the_saved_model(tiny_run: Path):
    # Importing the project's model package registers its Keras classes: Keras then loads the model in safe mode,
    # whichever is imported first, or through any of its modules (README "What a run leaves behind"); the package's
    # own import loads no TensorFlow: a fresh interpreter is the behaviour under test.
    load = (
        f"model = keras.saving.load_model({str(tiny_run / 'model.keras')!r}, safe_mode=True)\n"
        "mha = model.backbone.get_layer('encoder_0').attention\n"
        "print(mha.num_heads, mha.key_dim, mha.value_dim, model.backbone.get_layer('embedding').embed_dim)\n"
    )
    # The project first, then the API a notebook uses (which imports the model package), then Keras: as quiet
    # as the commands (TensorFlow's C++ start-up lines on fd 2 hidden).
    through_the_api = (
        "import sys, mha_project\n"
        "assert 'tensorflow' not in sys.modules and 'keras' not in sys.modules\n"
        "from mha_project.extras.analysis.runs import load_run\n"
        "import keras\n" + load
    )
    # Keras first, then one module of the model package.
    keras_first = "import keras\nfrom mha_project.model import layers\n" + load
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    for code in (through_the_api, keras_first):
        result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
        assert result.returncode == 0 and "could not register" not in result.stderr, result.stderr[-2000:]
        assert result.stdout.split() == ["2", "8", "8", "16"]  # heads=2 key_dim=8 embed_dim=16 in debug=tiny
        if code == through_the_api:
            for chatter in ("cuInit", "oneDNN", "cudart_stub", "absl::InitializeLog", "cpu_feature_guard"):
                assert chatter not in result.stderr, result.stderr[-2000:]


def test_start_is_quiet_and_the_model_summary_is_kept(tiny_run: Path):
    stderr = (tiny_run.parent / "stderr.txt").read_text()
    for chatter in ("cuInit", "oneDNN", "cudart_stub", "absl::InitializeLog", "Assets written"):
        assert chatter not in stderr, chatter
    summary = (tiny_run / "model_summary.txt").read_text()
    assert "MultiHeadAttention(num_heads=2, key_dim=8, value_dim=8) on embed_dim 16" in summary
    assert "Total params" in summary and "EncoderBlock" in summary
    # One table, the backbone nested in it, counting the model's parameters only (no optimizer state).
    params = json.loads((tiny_run / "metrics.json").read_text())["params"]
    assert summary.count("Total params") == 1 and f"Total params: {params:,} " in summary
    assert summary.splitlines()[0] in (tiny_run / "train.log").read_text()  # also shown at the start


def test_the_last_lines_say_which_epoch_was_tested_and_why_training_stopped(tmp_path):
    # lr=1e-9: validation accuracy never improves, so early stopping (patience 1) ends training after epoch 2.
    run_dir = tmp_path / "run"
    overrides = ["epochs=4", "lr=1e-9", "trainer.early_stopping_patience=1", "trainer.warmup_fraction=0"]
    result = train_tiny(run_dir, *overrides, *QUIET)
    assert result.returncode == 0, result.stderr[-3000:]
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert (metrics["stopped_early"], metrics["epochs_run"], metrics["best_epoch"]) == (True, 2, 1)
    assert (
        "tested epoch 1's weights (the best val accuracy); early stopping ended training after epoch 2 of 4: "
        "val accuracy had not improved for trainer.early_stopping_patience epochs"
    ) in result.stdout.strip().splitlines()[-1]


@pytest.mark.slow
def test_several_validations_per_epoch(tmp_path):
    """trainer.validations_per_epoch=2: two history rows per pass over the data, half an epoch apart."""
    run_dir = tmp_path / "run"
    result = train_tiny(run_dir, "trainer.validations_per_epoch=2", *QUIET)
    assert result.returncode == 0, result.stderr[-3000:]
    with open(run_dir / "history.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [float(r["data_epochs"]) for r in rows] == [0.5, 1.0]
    assert float(rows[0]["elapsed_seconds"]) < float(rows[1]["elapsed_seconds"])
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["epochs_run"] == 1


def test_a_bfloat16_run_with_dollar_signs_in_its_probes_works_with_every_tool(tmp_path: Path):
    # A mixed_bfloat16 run's model.keras loads in every tool (each sub-layer keeps the layer's own policy, not
    # the loading process's float32), and "$...$" in a probe text is drawn as text, not parsed as mathtext.
    # In-process (each tool's command line is tested on its own): the tools run under float32, as a new
    # process would.
    import keras

    from conftest import compose_cfg
    from mha_project.extras.analysis.evaluate import evaluate_run
    from mha_project.extras.analysis.inspection import inspect_text
    from mha_project.training.train import train

    run_dir = tmp_path / "bf16"
    probe = "logger.attention.probe_texts=['What a waste of $$ buying things for $5']"
    try:
        recorded = train(compose_cfg(*TINY, "trainer.precision=mixed_bfloat16", probe), run_dir)["test_accuracy"]
    finally:
        keras.mixed_precision.set_global_policy("float32")
    assert evaluate_run(run_dir)["test_accuracy"] == pytest.approx(recorded, abs=0.01)
    inspect_text(run_dir, "the coffee costs $5 and $3", out=str(tmp_path / "grid.png"))
    assert (tmp_path / "grid.png").stat().st_size > 0
    if importlib.util.find_spec("mha_project.extras.head_analysis"):  # the extra's tools, where it is present
        from mha_project.extras.head_analysis.importance import run_head_importance
        from mha_project.extras.head_analysis.patterns import run_head_patterns

        assert run_head_patterns(run_dir, 10, str(tmp_path / "patterns"))["heads"]
        run_head_importance(run_dir, str(tmp_path / "importance"))
        assert (tmp_path / "importance" / "head_importance.json").exists()


def test_a_run_turns_text_into_the_ids_model_keras_takes(tiny_run: Path):
    from mha_project.extras.analysis.runs import load_run

    run = load_run(tiny_run)
    ids = run.token_ids(["great coffee", "great coffee, would buy again and again"])
    assert ids.dtype == np.int32 and ids.shape[0] == 2 and (ids[0, 2:] == 0).all() and (ids[1] > 0).all()
    predicted = run.predict(["great coffee"])[0]
    assert list(predicted) and set(predicted) == set(run.class_names)
    assert list(predicted.values()) == sorted(predicted.values(), reverse=True)
    probs = keras_predict(run.model, ids[:1])
    assert max(predicted.values()) == pytest.approx(float(probs.max()), abs=1e-6)
    # One string is one text, not one per character; no texts give no answer, as the SavedModel does.
    assert run.predict("great coffee") == [predicted] and run.token_ids("great coffee").shape[0] == 1
    assert run.predict([]) == [] and run.token_ids([]).shape == (0, 0)
    with pytest.raises(TypeError, match="texts must be strings; got int 3"):
        run.predict(["fine", 3])


def keras_predict(model, ids):
    return np.asarray(model.predict(ids, verbose=0))
