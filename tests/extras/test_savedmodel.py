"""export=true: the SavedModel beside model.keras takes raw strings, tokenises them as training did and names its
outputs as TF Serving's classify signature does."""

import json
import subprocess
import sys
from pathlib import Path

import keras
import numpy as np
import pytest

from conftest import compose_cfg


@pytest.mark.slow
@pytest.mark.parametrize("truncation, other", [("head", "tail"), ("tail", "head"), ("head_tail", "head")])
def test_the_export_reads_the_tokens_training_read(tmp_path: Path, truncation, other):
    import numpy as np
    import tensorflow as tf

    from mha_project.data.pipeline import TextPreprocessor, pad_batch
    from mha_project.data.vocabulary import make_vectorizer
    from mha_project.extras.savedmodel.export import export_inference_model
    from mha_project.training.train import build_model

    cfg = compose_cfg("debug=tiny")
    texts = ["great " * 3 + "awful " * 20, "awful " * 3 + "great " * 20 + "fine", "good"]
    vectorizer = make_vectorizer(texts, 20)
    keras.utils.set_random_seed(0)
    model = build_model(cfg, vectorizer.vocabulary_size(), 2)
    export_inference_model(model, TextPreprocessor(vectorizer, 8, truncation), tmp_path / "export")
    exported = tf.saved_model.load(str(tmp_path / "export"))  # held: its variables live as long as it does
    served = exported.serve(tf.constant(texts))["scores"].numpy()
    trained_on = model.predict(pad_batch(TextPreprocessor(vectorizer, 8, truncation).encode(texts)), verbose=0)
    np.testing.assert_allclose(served, trained_on, atol=1e-5)
    # ... and the texts are long enough for the other truncation to give other answers
    assert not np.allclose(
        served, model.predict(pad_batch(TextPreprocessor(vectorizer, 8, other).encode(texts)), verbose=0), atol=1e-4
    )


@pytest.mark.slow
@pytest.mark.subprocess
def test_exported_model_takes_raw_strings_and_names_its_outputs(tiny_run: Path):
    import shutil

    import tensorflow as tf

    served = tf.saved_model.load(str(tiny_run / "export"))
    out = served.serve(tf.constant(["great coffee, would buy again", "", "ok"]))
    probs = out["scores"].numpy()
    assert probs.shape == (3, 2)
    np.testing.assert_allclose(probs.sum(-1), 1.0, atol=1e-5)
    names = json.loads((tiny_run / "metrics.json").read_text())["class_names"]
    assert [c.decode() for c in out["classes"].numpy()[0]] == names
    assert [c.decode() for c in out["predicted_class"].numpy()] == [names[i] for i in probs.argmax(-1)]

    # What a real client sees (named outputs, not a bare output_0): TensorFlow's own saved_model_cli.
    # Beside this interpreter first: `venv/bin/python -m pytest` works without an activated venv.
    beside = Path(sys.executable).with_name("saved_model_cli")
    cli = str(beside) if beside.is_file() else shutil.which("saved_model_cli")
    assert cli, "saved_model_cli comes with the tensorflow package"
    shown = subprocess.run(
        [cli, "show", "--dir", str(tiny_run / "export"), "--tag_set", "serve", "--signature_def", "serve"],
        capture_output=True,
        text=True,
        timeout=120,
    ).stdout
    assert "inputs['text']" in shown and "output_0" not in shown
    for output in ("scores", "classes", "predicted_class"):
        assert f"outputs['{output}']" in shown, shown
    run = subprocess.run(
        [cli, "run", "--dir", str(tiny_run / "export"), "--tag_set", "serve", "--signature_def", "serve"]
        + ["--input_exprs", "text=['great coffee, would buy again']"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "predicted_class" in run.stdout and any(name in run.stdout for name in names), run.stderr[-2000:]
