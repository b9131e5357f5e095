"""The n-gram branch (model.ngram_branch): trains beside the encoder or alone, in-process from composed
configs; its run exports a SavedModel that answers raw strings as model.keras does (marked slow)."""

from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf

from conftest import compose_cfg
from mha_project.analysis.runs import load_run
from mha_project.errors import UserError
from mha_project.training.train import train

pytestmark = pytest.mark.slow
TEXTS = ["great coffee, would buy again", "stale, bitter! and late?", "ok", ""]


def served_and_kept(run_dir: Path):
    run = load_run(run_dir)
    exported = tf.saved_model.load(str(run_dir / "export"))  # held: its variables live with it
    served = exported.serve(tf.constant(TEXTS))["scores"].numpy()
    return served, np.asarray(run.model.predict(run.token_ids(TEXTS), verbose=0)), run


def test_the_wide_and_deep_run_exports_what_model_keras_answers(tmp_path: Path):
    run_dir = tmp_path / "run"
    metrics = train(compose_cfg("debug=tiny", "model.ngram_branch=bigram", "model.ngram_buckets=1024"), run_dir)
    assert metrics["hparams"]["ngram_branch"] == "bigram"
    served, kept, run = served_and_kept(run_dir)
    np.testing.assert_allclose(served, kept, atol=1e-5)
    branch = run.model.get_layer("ngram_branch")
    assert branch.buckets == 1024 and run.model.get_layer("wide_and_deep") is not None
    assert (run_dir / "attention.html").exists()  # the encoder's attention is still there to look at
    load_run(run_dir, needs_attention=True)


def test_the_bag_alone_trains_and_the_attention_tools_say_it_has_none(tmp_path: Path):
    run_dir = tmp_path / "run"
    train(compose_cfg("debug=tiny", "model.ngram_branch=bigram_alone", "model.ngram_buckets=1024"), run_dir)
    served, kept, run = served_and_kept(run_dir)
    np.testing.assert_allclose(served, kept, atol=1e-5)
    assert not any(isinstance(layer, keras.layers.MultiHeadAttention) for layer in run.model._flatten_layers())
    assert not (run_dir / "attention.html").exists() and not (run_dir / "tensorboard" / "attention").exists()
    with pytest.raises(UserError, match="model.ngram_branch=bigram_alone: its model is a bag of n-grams without"):
        load_run(run_dir, needs_attention=True)
