"""Run directories saved by earlier versions keep loading: a tiny run made at commit 422599d (before the
package layout), committed in tests/fixtures/run_422599d."""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from conftest import ROOT, run_script

FIXTURE = ROOT / "tests" / "fixtures" / "run_422599d"


def test_an_old_run_loads_and_evaluates_to_the_accuracy_it_recorded():
    from mha_project.analysis.evaluate import evaluate_run
    from mha_project.analysis.runs import load_run

    recorded = json.loads((FIXTURE / "metrics.json").read_text())
    run = load_run(FIXTURE)
    assert run.class_names == ["great", "other"] and run.seq_len == 32
    result = evaluate_run(FIXTURE)
    assert result["test_accuracy"] == pytest.approx(recorded["test_accuracy"], abs=1e-6)
    assert result["test_loss"] == pytest.approx(recorded["test_loss"], rel=1e-5)
    assert result["data_changed"] == []  # it recorded no fingerprint: nothing to compare


def test_an_old_model_file_predicts_with_the_current_layers():
    import keras

    import mha_project  # noqa: F401  (registers the custom layers, as the README says)

    model = keras.saving.load_model(FIXTURE / "model.keras", safe_mode=True)
    probs = keras.ops.convert_to_numpy(model(np.array([[5, 6, 7, 0]], "int32")))
    assert probs.shape == (1, 2) and abs(float(probs.sum()) - 1) < 1e-5


@pytest.mark.slow
def test_the_analysis_scripts_read_an_old_run(tmp_path: Path):
    run_dir = tmp_path / "old"
    shutil.copytree(FIXTURE, run_dir)
    for script, *args in (
        ("evaluate.py",),
        ("inspect_attention.py", "great coffee", "--out", str(tmp_path / "grid.png")),
        ("head_patterns.py", "--texts", "10", "--out", str(tmp_path / "patterns")),
    ):
        result = run_script(script, str(run_dir), *args)
        assert result.returncode == 0, f"{script}: {result.stderr[-2000:]}"


PRETRAINERS = ROOT / "tests" / "fixtures" / "pretrainers_fde45e6"


@pytest.mark.parametrize("name", ["masked_lm", "electra"])
def test_a_pretraining_model_saved_before_the_backbone_loads_with_its_weights(name, tmp_path: Path):
    # Saved at commit fde45e6, whose pretraining models held the encoder's layers as their own attributes;
    # outputs.npz holds what they computed then on the inputs stored beside it.
    from mha_project.analysis.runs import load_model_safely

    saved = np.load(PRETRAINERS / "outputs.npz")
    inputs = {"token_ids": saved["token_ids"], "mask_positions": saved["mask_positions"]}
    model = load_model_safely(PRETRAINERS / f"{name}.keras")
    assert model.backbone.name == "backbone" and len(model.backbone.blocks) == 2
    np.testing.assert_allclose(np.asarray(model(inputs)), saved[name], atol=1e-6)
    if name == "electra":
        np.testing.assert_allclose(np.asarray(model.generator(inputs)), saved["generator"], atol=1e-6)
    model.save(tmp_path / "again.keras")  # and it saves in today's layout
    np.testing.assert_allclose(np.asarray(load_model_safely(tmp_path / "again.keras")(inputs)), saved[name], atol=1e-6)
