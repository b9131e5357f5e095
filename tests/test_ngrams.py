"""The n-gram branch (model.ngram_branch): its own learning rate; it trains beside the encoder or alone,
in-process from composed configs, and its run exports a SavedModel that answers raw strings as model.keras
does (those two marked slow)."""

import subprocess
import sys
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf

from conftest import ROOT, compose_cfg, event_records, run_script
from mha_project.analysis.runs import load_run
from mha_project.errors import UserError
from mha_project.model.classifier import build_classifier
from mha_project.training.fitting import compile_classifier
from mha_project.training.train import train

TEXTS = ["great coffee, would buy again", "stale, bitter! and late?", "ok", ""]


def served_and_kept(run_dir: Path):
    run = load_run(run_dir)
    exported = tf.saved_model.load(str(run_dir / "export"))  # held: its variables live with it
    served = exported.serve(tf.constant(TEXTS))["scores"].numpy()
    return served, np.asarray(run.model.predict(run.token_ids(TEXTS), verbose=0)), run


def test_ngram_lr_gives_the_branch_its_own_optimizer_and_one_step_moves_it_further():
    overrides = ("debug=tiny", "model.ngram_branch=bigram", "model.ngram_buckets=64", "lr=0.001")
    shared, own = (compose_cfg(*overrides, *extra) for extra in ((), ("trainer.ngram_lr=0.1",)))
    ids = np.array([[5, 6, 7, 0], [8, 9, 0, 0]], "int32")
    moved = {}
    for name, cfg in (("shared", shared), ("own", own)):
        keras.utils.set_random_seed(0)
        model = build_classifier(cfg.model, vocab_size=50, num_classes=2)
        compile_classifier(model, cfg.trainer, total_steps=100)
        several = isinstance(model.optimizer, keras.optimizers.MultiOptimizer)
        assert several == (name == "own") and (not several or len(model.optimizer.optimizers) == 2)
        table = model.get_layer("ngram_branch").embedding.embeddings
        before = np.array(table)
        for _ in range(3):  # past the warm-up's first step, whose rate is 0
            model.train_on_batch(ids, np.array([0, 1]))
        moved[name] = float(np.abs(np.array(table) - before).max())
    # Adam's step is about the rate whatever the gradient's size: 100x the rate, about 100x the move.
    assert moved["own"] > 30 * moved["shared"] > 0


@pytest.mark.slow
def test_the_wide_and_deep_run_exports_what_model_keras_answers(tmp_path: Path):
    run_dir = tmp_path / "run"
    overrides = ("debug=tiny", "model.ngram_branch=bigram", "model.ngram_buckets=1024", "model.local_conv=3")
    metrics = train(compose_cfg(*overrides), run_dir)  # the local convolution inside the encoder too
    assert metrics["hparams"]["ngram_branch"] == "bigram" and metrics["hparams"]["local_conv"] == 3
    served, kept, run = served_and_kept(run_dir)
    np.testing.assert_allclose(served, kept, atol=1e-5)
    branch = run.model.get_layer("ngram_branch")
    assert branch.buckets == 1024 and run.model.get_layer("wide_and_deep") is not None
    assert run.model.backbone.get_layer("local_conv").width == 3
    assert (run_dir / "attention.html").exists()  # the encoder's attention is still there to look at
    load_run(run_dir, needs_attention=True)


@pytest.mark.slow
@pytest.mark.parametrize("branch", ["bigram", "bigram_alone"])
def test_the_nb_branch_takes_its_ratios_from_the_training_labels_alone_and_exports_them(tmp_path: Path, branch):
    from mha_project.data.pipeline import pipeline_from_cfg
    from mha_project.data.sources import load_dataset
    from mha_project.model.ngrams import NaiveBayesNgrams

    run_dir = tmp_path / "run"
    cfg = compose_cfg(
        "debug=tiny", f"model.ngram_branch={branch}", "model.ngram_weighting=nb", "model.ngram_buckets=512"
    )
    metrics = train(cfg, run_dir)
    assert metrics["hparams"]["ngram_weighting"] == "nb" and metrics["test_accuracy"] > 0
    served, kept, run = served_and_kept(run_dir)
    np.testing.assert_allclose(served, kept, atol=1e-5)  # the SavedModel carries the ratios too
    saved = np.asarray(run.model.get_layer("ngram_branch").ratios)
    data = load_dataset(cfg.data, cfg.seed)

    def ratios(texts, labels):
        layer = NaiveBayesNgrams(run.vectorizer.vocabulary_size(), 2, buckets=512)
        layer.adapt(pipeline_from_cfg(cfg, texts, labels, run.vectorizer, shuffle=False).as_numpy_iterator())
        return np.asarray(layer.ratios)

    np.testing.assert_allclose(saved, ratios(data.train_texts, data.train_labels), rtol=1e-5, atol=1e-6)
    with_val = ratios([*data.train_texts, *data.val_texts], np.concatenate([data.train_labels, data.val_labels]))
    assert not np.allclose(saved, with_val, atol=1e-4)  # validation labels would change them: they never enter


@pytest.mark.subprocess
@pytest.mark.slow
def test_the_bag_alone_trains_and_the_attention_tools_say_it_has_none(tmp_path: Path):
    run_dir = tmp_path / "run"
    result = run_script("train.py", "debug=tiny", "model.ngram_branch=bigram_alone", "model.ngram_buckets=1024",
                        f"hydra.run.dir={run_dir}")  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    steps = result.stdout.split("next:")[1]
    assert "evaluate.py" in steps and "inspect_attention.py" not in steps and "head_patterns.py" not in steps
    for script in ("inspect_attention.py", "head_patterns.py", "head_importance.py"):
        extra = ["great tea"] if script == "inspect_attention.py" else []
        # A fresh process: the refusal must come from the run's config, before TensorFlow is imported.
        probe = (
            "import runpy, sys\n"
            f"sys.argv = [{script!r}, {str(run_dir)!r}, *{extra!r}]\n"
            f"try:\n    runpy.run_path('scripts/{script}', run_name='__main__')\n"
            "finally:\n    print('tensorflow imported:', 'tensorflow' in sys.modules)\n"
        )
        refused = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert refused.returncode == 2 and "its model is a bag of n-grams without attention" in refused.stderr
        assert "Traceback" not in refused.stderr and "tensorflow imported: False" in refused.stdout
    served, kept, run = served_and_kept(run_dir)
    np.testing.assert_allclose(served, kept, atol=1e-5)
    assert not any(isinstance(layer, keras.layers.MultiHeadAttention) for layer in run.model._flatten_layers())
    assert not (run_dir / "attention.html").exists()
    assert not [tag for tag in event_records(run_dir / "tensorboard") if tag.startswith(("attention", "head_view"))]
    with pytest.raises(UserError, match="model.ngram_branch=bigram_alone: its model is a bag of n-grams without"):
        load_run(run_dir, needs_attention=True)
