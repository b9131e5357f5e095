"""The rotary extra: queries and keys rotated by position inside attention (``model/backbone=rotary``)."""

import keras
import numpy as np
import pytest
from keras.src.testing import TestCase  # Keras's own layer test harness (not public API)

from conftest import compose_cfg, small_model
from mha_project.extras.rotary.attention import (
    RotaryEncoderBackbone,
    RotaryEncoderBlock,
    RotaryMultiHeadAttention,
    rotate_positions,
)
from mha_project.model.backbone import encoder_blocks
from mha_project.model.classifier import model_summary

IDS = np.array([[5, 6, 7, 8, 0, 0], [3, 4, 0, 0, 0, 0], [9, 9, 9, 9, 9, 9]], dtype="int32")


def test_rotary_positions_rotate_pairs_and_keep_norms():
    x = np.random.default_rng(0).normal(size=(2, 7, 3, 8)).astype("float32")
    rotated = np.asarray(rotate_positions(x))
    np.testing.assert_allclose(rotated[:, 0], x[:, 0], atol=1e-6)  # position 0: angle 0
    np.testing.assert_allclose(np.linalg.norm(rotated, axis=-1), np.linalg.norm(x, axis=-1), rtol=1e-5)
    # Position 3, first pair (features 0 and 4) turns by 3 radians (frequency 1), as in RoFormer.
    c, s = np.cos(3.0), np.sin(3.0)
    np.testing.assert_allclose(rotated[:, 3, :, 0], x[:, 3, :, 0] * c - x[:, 3, :, 4] * s, atol=1e-5)
    np.testing.assert_allclose(rotated[:, 3, :, 4], x[:, 3, :, 4] * c + x[:, 3, :, 0] * s, atol=1e-5)
    with pytest.raises(ValueError, match="even key_dim, got 5"):
        rotate_positions(np.zeros((1, 3, 1, 5), "float32"))


def test_rotary_attention_sees_positions_that_plain_attention_cannot():
    # Ten copies of one vector: without position information every query scores every key alike.
    x = np.tile(np.random.default_rng(1).normal(size=(1, 1, 16)).astype("float32"), (1, 10, 1))
    keras.utils.set_random_seed(2)
    plain = keras.layers.MultiHeadAttention(num_heads=2, key_dim=8)
    keras.utils.set_random_seed(2)
    rotary = RotaryMultiHeadAttention(num_heads=2, key_dim=8)
    _, plain_scores = plain(x, x, return_attention_scores=True)
    _, rotary_scores = rotary(x, x, return_attention_scores=True)
    np.testing.assert_allclose(np.asarray(plain_scores), 0.1, atol=1e-6)
    assert np.ptp(np.asarray(rotary_scores), axis=-1).max() > 1e-3
    # ... and the scores depend on the distance only: query 2 -> key 3 equals query 5 -> key 6.
    np.testing.assert_allclose(
        rotary_scores[0, :, 2, 3] / rotary_scores[0, :, 2, 2],
        rotary_scores[0, :, 5, 6] / rotary_scores[0, :, 5, 5],
        rtol=1e-4,
    )


@pytest.mark.slow
def test_rotary_classifier_has_no_position_table_and_round_trips(tmp_path):
    keras.utils.set_random_seed(6)
    model = small_model(20, 2, "model/backbone=rotary", max_len=12, num_layers=2, num_heads=4, ff_dim=32, pooling="cls")
    assert isinstance(model.backbone, RotaryEncoderBackbone)
    assert not any("position_embedding" in w.path for w in model.weights)
    assert all(isinstance(block.attention, RotaryMultiHeadAttention) for block in encoder_blocks(model))
    assert "each RotaryMultiHeadAttention(num_heads=4, key_dim=8" in model_summary(model)
    short = model.predict(np.array([[5, 6, 7]]), verbose=0)
    np.testing.assert_allclose(model.predict(np.array([[5, 6, 7, 0, 0]]), verbose=0), short, atol=1e-5)
    # Word order matters to it (a bag of words would give the same output).
    assert not np.allclose(model.predict(np.array([[7, 6, 5]]), verbose=0), short, atol=1e-6)
    model.save(tmp_path / "m.keras")
    reloaded = keras.saving.load_model(tmp_path / "m.keras", safe_mode=True)  # this module registered its classes
    assert all(isinstance(block.attention, RotaryMultiHeadAttention) for block in encoder_blocks(reloaded))
    np.testing.assert_allclose(reloaded.predict(IDS, verbose=0), model.predict(IDS, verbose=0), atol=1e-6)


def test_an_odd_key_dim_is_refused_before_anything_runs():
    from mha_project.config import validate_config
    from mha_project.errors import ConfigError

    # Refused before anything is written, so the corrected command can use the same run directory.
    with pytest.raises(ConfigError, match=r"^key_dim=7 is invalid with model/backbone=rotary: .* even"):
        validate_config(compose_cfg("model/backbone=rotary", "key_dim=7"))
    validate_config(compose_cfg("model/backbone=rotary", "key_dim=8"))
    validate_config(compose_cfg("key_dim=7"))  # learned positions take any key_dim


def test_a_rotary_block_round_trips_as_itself():
    block = RotaryEncoderBlock(num_heads=2, key_dim=4, ff_dim=6, name="e")
    clone = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(block))
    assert type(clone) is RotaryEncoderBlock and clone.get_config() == block.get_config()


class RotaryLayerChecks(TestCase):
    """Keras's ``run_layer_test`` on the rotary attention and on an encoder block that uses it."""

    @pytest.mark.slow
    def test_encoder_block_with_rotary_positions_and_pre_norm(self):
        self.run_layer_test(
            RotaryEncoderBlock,
            init_kwargs=dict(num_heads=2, key_dim=4, ff_dim=8, norm_first=True),
            input_shape=(2, 5, 6),
            expected_output_shape=(2, 5, 6),
            expected_num_trainable_weights=16,
        )

    def test_rotary_multi_head_attention(self):
        self.run_layer_test(
            RotaryMultiHeadAttention,
            init_kwargs=dict(num_heads=2, key_dim=4),
            input_shape={"query_shape": (2, 5, 6), "value_shape": (2, 5, 6)},
            expected_output_shape=(2, 5, 6),
            expected_num_trainable_weights=8,
            # As in Keras's own MultiHeadAttention test: the harness's training model cannot pass query and
            # value by name; RotaryEncoderBlock's test trains it.
            run_training_check=False,
        )
