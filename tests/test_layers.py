import keras
import numpy as np
import pytest
from keras.src.testing import TestCase  # Keras's own layer test harness (not public API)

from conftest import small_model
from mha_project.attention.scores import attention_scores
from mha_project.model.backbone import encoder_blocks
from mha_project.model.layers import EncoderBlock, LocalConvolution, TokenAndPositionEmbedding
from mha_project.model.poolings import MaskedMeanPooling


def layer_model(vocab_size=20, num_classes=2, **kw):
    return small_model(vocab_size, num_classes, max_len=12, num_layers=2, num_heads=4, ff_dim=32, dropout=0.1, **kw)


IDS = np.array([[5, 6, 7, 8, 0, 0], [3, 4, 0, 0, 0, 0], [9, 9, 9, 9, 9, 9]], dtype="int32")


def test_encoder_block_shapes_and_scores():
    block = EncoderBlock(num_heads=3, key_dim=5, value_dim=7, ff_dim=11)
    out, scores = block(keras.random.normal((2, 9, 12)), return_attention_scores=True)
    assert tuple(out.shape) == (2, 9, 12)
    assert tuple(scores.shape) == (2, 3, 9, 9)
    assert block.attention.num_heads == 3 and block.attention.key_dim == 5 and block.attention.value_dim == 7


@pytest.mark.parametrize("norm_first", [False, True])
def test_padding_gets_zero_attention(norm_first):
    keras.utils.set_random_seed(1)
    model = layer_model(20, 3, norm_first=norm_first)
    for layer_scores in attention_scores(model, IDS):
        real = IDS != 0
        # columns of padding tokens: exactly zero for every query
        assert np.all(layer_scores[~np.broadcast_to(real[:, None, None, :], layer_scores.shape)] == 0)
        # rows of real tokens sum to one
        sums = layer_scores.sum(-1)
        np.testing.assert_allclose(sums[np.broadcast_to(real[:, None, :], sums.shape)], 1.0, atol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("local_conv", [0, 3])  # the convolution reads padding as zeros, as it reads the edges
def test_padding_does_not_change_prediction(local_conv):
    keras.utils.set_random_seed(2)
    model = layer_model(20, 2, local_conv=local_conv)
    short = model.predict(np.array([[5, 6, 7]]), verbose=0)
    padded = model.predict(np.array([[5, 6, 7, 0, 0, 0, 0]]), verbose=0)
    np.testing.assert_allclose(short, padded, atol=1e-5)


def test_masked_mean_pooling_ignores_padding_and_survives_empty_rows():
    x = np.array([[[1.0], [3.0], [100.0]], [[7.0], [7.0], [7.0]]], dtype="float32")
    mask = np.array([[True, True, False], [False, False, False]])
    out = np.asarray(MaskedMeanPooling()(x, mask=mask))
    assert out[0, 0] == pytest.approx(2.0)
    assert out[1, 0] == 0.0 and np.isfinite(out).all()


def test_embedding_mask_and_short_inputs():
    emb = TokenAndPositionEmbedding(vocab_size=10, max_len=8, embed_dim=4)
    ids = np.array([[1, 2, 0]])
    assert tuple(emb(ids).shape) == (1, 3, 4)
    assert np.asarray(emb.compute_mask(ids)).tolist() == [[True, True, False]]


@pytest.mark.parametrize(
    "layer",
    [
        TokenAndPositionEmbedding(vocab_size=10, max_len=8, embed_dim=4, name="e"),
        EncoderBlock(
            num_heads=2,
            key_dim=3,
            value_dim=5,
            ff_dim=6,
            dropout=0.2,
            activation="relu",
            use_bias=False,
            norm_first=True,
            name="b",
        ),
        EncoderBlock(num_heads=2, key_dim=3, ff_dim=6, dropout=0.2, attention_dropout=0.0, name="a"),
        MaskedMeanPooling(name="p"),
        TokenAndPositionEmbedding(vocab_size=10, max_len=8, embed_dim=4, cls_token=True, name="c"),
        TokenAndPositionEmbedding(vocab_size=10, max_len=8, embed_dim=4, learned_positions=False, name="d"),
        EncoderBlock(num_heads=2, key_dim=4, ff_dim=6, use_gate=True, sliding_window=2, name="g"),
    ],
)
def test_layer_config_round_trip(layer):
    config = keras.saving.serialize_keras_object(layer)
    clone = keras.saving.deserialize_keras_object(config)
    assert type(clone) is type(layer)
    assert clone.get_config() == layer.get_config()


def test_sliding_window_keeps_each_token_to_its_neighbours_and_the_gate_adds_a_projection():
    x = keras.random.normal((1, 6, 8), seed=3)
    windowed = EncoderBlock(num_heads=2, key_dim=4, ff_dim=8, sliding_window=2)
    _, scores = windowed(x, return_attention_scores=True)
    distance = np.abs(np.arange(6)[:, None] - np.arange(6)[None, :])
    scores = np.asarray(scores)
    assert np.all(scores[..., distance >= 2] == 0) and np.all(scores[..., distance < 2] > 0)
    plain = EncoderBlock(num_heads=2, key_dim=4, ff_dim=8)
    gated = EncoderBlock(num_heads=2, key_dim=4, ff_dim=8, use_gate=True)
    plain.build((None, 6, 8))
    gated.build((None, 6, 8))
    # the gate: one more query-sized projection (kernel and bias) per head
    assert gated.count_params() - plain.count_params() == 8 * 2 * 4 + 2 * 4


def test_a_causal_block_attends_to_earlier_tokens_only_and_the_last_pooling_reads_the_last_real_one():
    from mha_project.model.poolings import LastTokenPooling

    x = keras.random.normal((2, 6, 8), seed=3)
    causal = EncoderBlock(num_heads=2, key_dim=4, ff_dim=8, causal=True)
    out, scores = causal(x, return_attention_scores=True)
    later = np.arange(6)[None, :] > np.arange(6)[:, None]
    assert np.all(np.asarray(scores)[..., later] == 0) and np.all(np.asarray(scores)[..., ~later] > 0)
    # a token's output does not change with what comes after it
    changed = np.asarray(x).copy()
    changed[:, 4:] = 0.5
    np.testing.assert_allclose(np.asarray(causal(changed))[:, :4], np.asarray(out)[:, :4], atol=1e-5)
    mask = np.array([[True] * 4 + [False] * 2, [True] * 6])
    np.testing.assert_allclose(LastTokenPooling()(x, mask=mask), np.asarray(x)[[0, 1], [3, 5]], atol=1e-6)


@pytest.mark.parametrize("attention_dropout, expected", [(None, 0.3), (0.0, 0.0), (0.1, 0.1)])
def test_attention_dropout_defaults_to_dropout(attention_dropout, expected):
    block = EncoderBlock(num_heads=2, key_dim=4, ff_dim=8, dropout=0.3, attention_dropout=attention_dropout)
    block.build((None, 5, 8))
    assert block.attention.dropout == expected
    assert block.attention_output_dropout.rate == block.ff_dropout.rate == 0.3


@pytest.mark.slow
def test_model_round_trips_through_keras_file(tmp_path):
    keras.utils.set_random_seed(3)
    model = layer_model(20, 4, value_dim=6, norm_first=True)
    before = model.predict(IDS, verbose=0)
    model.save(tmp_path / "m.keras")
    reloaded = keras.saving.load_model(tmp_path / "m.keras", safe_mode=True)
    np.testing.assert_allclose(reloaded.predict(IDS, verbose=0), before, atol=1e-6)
    blocks = encoder_blocks(reloaded)
    assert len(blocks) == 2 and blocks[0].attention.value_dim == 6 and blocks[0].norm_first


@pytest.mark.slow
@pytest.mark.parametrize("pooling", ["mean_max", "cls", "last"])
def test_other_poolings_round_trip_and_ignore_padding(tmp_path, pooling):
    keras.utils.set_random_seed(4)
    model = layer_model(20, 2, pooling=pooling)
    short = model.predict(np.array([[5, 6, 7]]), verbose=0)
    np.testing.assert_allclose(model.predict(np.array([[5, 6, 7, 0, 0]]), verbose=0), short, atol=1e-5)
    model.save(tmp_path / "m.keras")
    reloaded = keras.saving.load_model(tmp_path / "m.keras", safe_mode=True)
    np.testing.assert_allclose(reloaded.predict(IDS, verbose=0), model.predict(IDS, verbose=0), atol=1e-6)
    if pooling == "cls":
        scores = attention_scores(model, IDS)[0]
        assert scores.shape[-1] == IDS.shape[1] + 1  # [CLS] is position 0


def test_classifier_head_any_number_of_classes():
    model = layer_model(20, 5)
    probs = model.predict(IDS, verbose=0)
    assert probs.shape == (3, 5)
    np.testing.assert_allclose(probs.sum(-1), 1.0, atol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("embedding_norm", ["layer_norm", "sqrt_dim", "none"])
def test_embedding_norm_round_trips_and_sets_the_first_attentions_input_scale(tmp_path, embedding_norm):
    keras.utils.set_random_seed(5)
    model = layer_model(50, 2, embedding_norm=embedding_norm, embed_dim=32)
    ids = np.random.default_rng(0).integers(1, 50, size=(8, 12)).astype("int32")
    x = np.asarray(model.backbone.get_layer("embedding")(ids))
    rms = float(np.sqrt(np.mean(x**2)))
    # What the first attention layer sees: unit scale with LayerNorm, ~0.03 * sqrt(32) with sqrt_dim,
    # Keras's +-0.05 uniform initialiser (rms ~0.04) without either.
    expected = {"layer_norm": (0.9, 1.1), "sqrt_dim": (0.1, 0.3), "none": (0.02, 0.08)}[embedding_norm]
    assert expected[0] < rms < expected[1]
    model.save(tmp_path / "m.keras")
    reloaded = keras.saving.load_model(tmp_path / "m.keras", safe_mode=True)
    assert reloaded.backbone.get_layer("embedding").embedding_norm == embedding_norm
    np.testing.assert_allclose(reloaded.predict(IDS, verbose=0), model.predict(IDS, verbose=0), atol=1e-6)


def test_unknown_embedding_norm_is_a_one_line_error():
    allowed = "must be one of layer_norm, sqrt_dim, none"
    with pytest.raises(ValueError, match=f"embedding_norm='bogus' is invalid: {allowed}"):
        TokenAndPositionEmbedding(vocab_size=10, max_len=8, embed_dim=4, embedding_norm="bogus")


# ---- Keras's own layer checks (what keras-hub runs on every layer) ---------------------------------


class KerasLayerChecks(TestCase):
    """``run_layer_test``: serialization round trip, weight counts, symbolic and eager calls, a training
    step, and a mixed_float16 check (the sub-layers must follow the layer's own dtype policy)."""

    def test_token_and_position_embedding(self):
        self.run_layer_test(
            TokenAndPositionEmbedding,
            init_kwargs=dict(vocab_size=20, max_len=8, embed_dim=4, embedding_norm="layer_norm", cls_token=True),
            input_data=np.array([[3, 4, 5, 0], [6, 7, 0, 0]], "int32"),
            expected_output_shape=(2, 5, 4),  # one position longer: the [CLS] vector
            expected_num_trainable_weights=5,  # tokens, positions, [CLS], LayerNorm gamma and beta
            supports_masking=True,
            expected_mask_shape=(2, 5),
        )

    @pytest.mark.slow
    def test_encoder_block(self):
        self.run_layer_test(
            EncoderBlock,
            init_kwargs=dict(num_heads=2, key_dim=4, ff_dim=8, dropout=0.1),
            input_shape=(2, 5, 6),
            expected_output_shape=(2, 5, 6),
            expected_num_trainable_weights=16,  # Q, K, V, O kernels + biases; 2 Dense; 2 LayerNorms
            expected_num_seed_generators=3,  # attention, residual and feed-forward dropout
        )

    def test_local_convolution(self):
        self.run_layer_test(
            LocalConvolution,
            init_kwargs=dict(width=3, dropout=0.1),
            input_shape=(2, 5, 6),
            expected_output_shape=(2, 5, 6),
            expected_num_trainable_weights=4,  # the Conv1D's kernel and bias, LayerNorm's gamma and beta
            expected_num_seed_generators=1,
            supports_masking=True,
        )

    @pytest.mark.slow
    def test_encoder_backbone(self):
        from mha_project.model.backbone import EncoderBackbone

        self.run_layer_test(
            EncoderBackbone,
            init_kwargs=dict(
                vocab_size=20, max_len=8, embed_dim=4, num_layers=2, num_heads=2, key_dim=4, ff_dim=8, norm_first=True
            ),
            input_data=np.array([[3, 4, 5, 0], [6, 7, 0, 0]], "int32"),
            expected_output_shape=(2, 4, 4),
            # embedding 3 (tokens, positions, LayerNorm x2) + 2 blocks x 16 + final LayerNorm 2
            expected_num_trainable_weights=4 + 2 * 16 + 2,
            expected_num_seed_generators=1 + 2 * 3,  # embedding dropout; per block attention, residual, ff
            # A functional model's masks travel on its output tensors, not through supports_masking:
            # test_padding_does_not_change_prediction checks that the classifier on it ignores padding.
        )

    @pytest.mark.slow
    def test_encoder_backbone_with_a_local_convolution(self):
        from mha_project.model.backbone import EncoderBackbone

        self.run_layer_test(
            EncoderBackbone,
            init_kwargs=dict(
                vocab_size=20, max_len=8, embed_dim=4, num_layers=1, num_heads=2, key_dim=4, ff_dim=8, local_conv=3
            ),
            input_data=np.array([[3, 4, 5, 0], [6, 7, 0, 0]], "int32"),
            expected_output_shape=(2, 4, 4),
            expected_num_trainable_weights=4 + 4 + 16,  # embedding, the convolution, one block
            expected_num_seed_generators=1 + 1 + 3,
        )

    def test_text_classifier(self):
        from mha_project.model.backbone import EncoderBackbone
        from mha_project.model.classifier import TextClassifier

        shape = dict(vocab_size=20, max_len=8, embed_dim=4, num_layers=1, num_heads=2, key_dim=4, ff_dim=8)
        backbone = EncoderBackbone(**shape)
        self.run_layer_test(
            TextClassifier,
            init_kwargs=dict(backbone=backbone, num_classes=3, pooling="mean_max"),
            input_data=np.array([[3, 4, 5, 0], [6, 7, 0, 0]], "int32"),
            expected_output_shape=(2, 3),
            expected_num_trainable_weights=4 + 16 + 2,  # the backbone's, then the softmax's kernel and bias
            # Its input is token ids: the harness's symbolic and training checks feed it float inputs.
            run_training_check=False,
        )

    def test_pooling_layers(self):
        from mha_project.model.poolings import FirstTokenPooling, LastTokenPooling, MaskedMaxPooling

        for pooling in (MaskedMeanPooling, MaskedMaxPooling, FirstTokenPooling, LastTokenPooling):
            self.run_layer_test(
                pooling, init_kwargs={}, input_shape=(2, 5, 3), expected_output_shape=(2, 3), supports_masking=True
            )


def test_encoder_block_returns_scores_in_the_functional_api():
    # A symbolic call returns the output and the scores, as an eager call does.
    inputs = keras.Input((7, 12))
    out, scores = EncoderBlock(num_heads=3, key_dim=4, ff_dim=8)(inputs, return_attention_scores=True)
    assert tuple(out.shape) == (None, 7, 12) and tuple(scores.shape) == (None, 3, 7, 7)
    model = keras.Model(inputs, [out, scores])
    eager_out, eager_scores = model(np.ones((2, 7, 12), "float32"))
    assert tuple(eager_scores.shape) == (2, 3, 7, 7)


def test_a_bfloat16_classifier_loads_and_predicts_in_a_float32_process(tmp_path):
    # Sub-layers keep the saved layer's dtype policy, whatever the loading process's global policy.
    from mha_project.extras.analysis.runs import load_model

    model = small_model(30, 2, "trainer.precision=mixed_bfloat16", max_len=12, num_layers=2, num_heads=4)
    expected = keras.ops.convert_to_numpy(model(IDS))
    model.save(tmp_path / "m.keras")
    assert keras.mixed_precision.global_policy().name == "float32"
    loaded = load_model(tmp_path / "m.keras")
    np.testing.assert_allclose(keras.ops.convert_to_numpy(loaded(IDS)), expected, atol=1e-6)
    block = encoder_blocks(loaded)[0]
    assert block.ff_dropout.dtype_policy.name == block.attention.dtype_policy.name == "mixed_bfloat16"
