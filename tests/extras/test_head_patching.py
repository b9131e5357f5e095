"""Activation patching: a head's clean output put into the corrupted run, measured by the share of the answer it
brings back; the identities any patching must keep, and the record a run's patching writes."""

import json

import keras
import numpy as np
import pytest

from conftest import run_script, small_model
from mha_project.extras.head_analysis.patching import clean_into, forward, head_patching, patched


def tiny_model(heads=3, layers=2, **changes):
    keras.utils.set_random_seed(0)
    return small_model(30, 2, max_len=10, embed_dim=12, num_layers=layers, num_heads=heads, key_dim=4, dropout=0.0,
                       **changes)  # fmt: skip


def pairs(count=16, seed=0):
    rng = np.random.default_rng(seed)
    clean = rng.integers(2, 30, size=(count, 10)).astype("int32")
    clean[: count // 2, 7:] = 0  # padding in half of them, where the twin has it too
    corrupted = np.where(rng.random(clean.shape) < 0.3, rng.integers(2, 30, size=clean.shape), clean)
    corrupted = np.where(clean == 0, 0, corrupted).astype("int32")
    return clean, corrupted, rng.integers(0, 2, size=count)


def test_the_hooked_forward_pass_is_the_models_own():
    model = tiny_model()
    clean, _, _ = pairs()
    log_probs, seen = forward(model, clean)
    np.testing.assert_allclose(np.exp(log_probs), model(clean, training=False), atol=1e-6)
    assert seen[(1, "heads")].shape == (16, 10, 3, 4) and seen[(1, "output")].shape == (16, 10, 12)
    assert "call" not in vars(model.backbone.blocks[0].attention._output_dense)  # the hook is gone afterwards


@pytest.mark.parametrize("changes", [{}, {"use_gate": True}, {"pooling": "cls"}])
def test_a_heads_own_clean_output_patched_into_the_clean_run_changes_nothing(changes):
    model = tiny_model(**changes)
    clean, _, _ = pairs()
    log_probs, seen = forward(model, clean)
    for layer in range(2):
        for heads in [[0], [1], [2], None]:
            again, _ = forward(model, clean, clean_into(seen, layer, heads))
            np.testing.assert_allclose(again, log_probs, atol=1e-5)


def test_patching_every_head_of_a_layer_is_patching_the_layers_attention_output():
    model = tiny_model()
    clean, corrupted, labels = pairs()
    corrupted_lp, _ = forward(model, corrupted)
    _, seen = forward(model, clean)
    for layer in range(2):
        by_heads, _ = forward(model, corrupted, clean_into(seen, layer, [0, 1, 2]))
        by_output, _ = forward(model, corrupted, clean_into(seen, layer, None))
        np.testing.assert_allclose(by_heads, by_output, atol=1e-5)
        assert np.abs(by_heads - corrupted_lp).max() > 1e-4  # and it is a change
    result = head_patching(model, clean, corrupted, labels)
    assert result["recovered"].shape == (2, 3) and result["layer_recovered"].shape == (2,)
    assert np.isfinite(result["recovered"]).all() and result["clean_metric"] != result["corrupted_metric"]


def test_the_hook_leaves_the_model_as_it_was():
    model = tiny_model()
    clean, corrupted, labels = pairs()
    before = np.asarray(model(clean, training=False))
    with patched(model, lambda layer, side, value: value * 0):
        zeroed = model(clean, training=False)
    assert np.abs(np.asarray(zeroed) - before).max() > 1e-4
    np.testing.assert_allclose(model(clean, training=False), before, atol=1e-6)


@pytest.mark.slow
def test_a_run_without_a_rule_is_patched_on_its_validation_texts_with_the_most_attended_word_replaced(tiny_run):
    result = run_script("head_patching.py", str(tiny_run), "--pairs", "16")
    assert result.returncode == 0, result.stderr[-2000:]
    saved = json.loads((tiny_run / "head_patching" / "patching.json").read_text())
    assert saved["pairs"] == 16 and "most-attended token" in saved["pairs_made"]
    assert np.array(saved["recovered"]).shape == (1, 2) and saved["clean_metric"] != saved["corrupted_metric"]
    assert (tiny_run / "head_patching" / "patching.png").read_bytes()[:4] == b"\x89PNG"
    assert "| layer | head | attention pattern |" in (tiny_run / "head_patching" / "patching.md").read_text()


def test_the_default_corruption_replaces_every_occurrence_of_the_most_attended_token_only():
    from mha_project.extras.head_analysis.patching import top_attended_corruption

    model = tiny_model()
    ids = np.array([[5, 7, 5, 9, 0, 0], [3, 4, 6, 8, 2, 11]], "int32")
    corrupted = top_attended_corruption(model, ids)
    for row, new in zip(ids, corrupted):
        replaced = set(row[new != row])
        assert len(replaced) == 1 and (new[row == replaced.pop()] == 1).all()
        assert (new[row == 0] == 0).all()  # padding stays padding
