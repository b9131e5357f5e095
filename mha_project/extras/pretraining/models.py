"""The pretraining tasks on an :class:`EncoderBackbone`: a masked language model and ELECTRA's replaced-token
detector."""

from __future__ import annotations

import keras
import tensorflow as tf
from keras import layers, ops

from mha_project import PACKAGE
from mha_project.model.backbone import EncoderBackbone


@keras.saving.register_keras_serializable(package=PACKAGE)
class MaskedLMHead(layers.Layer):
    """Predicts the token at each masked position: Dense(embed_dim, activation) -> LayerNorm -> logits.

    The BERT / keras-hub head. It runs on the encoder outputs *gathered at the masked positions only*
    (``(batch, P, embed_dim)``, P ~ 15% of the tokens), so the vocabulary-sized matrix product, the
    costliest part of a masked-LM step, is paid for those positions and not for every token.

    Args:
        vocab_size: number of token ids to predict over.
        activation: of the transform before the output projection.
        tie_embeddings: project with the transpose of the token embedding (passed to ``call`` as
            ``embedding_matrix``; BERT does this) instead of an own ``(embed_dim, vocab_size)`` kernel.
        layer_norm_epsilon: of the LayerNormalization.

    Call args:
        hidden: ``(batch, P, embed_dim)`` encoder outputs at the masked positions.
        embedding_matrix: ``(vocab_size, embed_dim)``, required when ``tie_embeddings``.

    Returns float32 logits ``(batch, P, vocab_size)``.

    Example:
    >>> head = MaskedLMHead(vocab_size=50, tie_embeddings=False)
    >>> tuple(head(keras.random.normal((2, 3, 8))).shape)
    (2, 3, 50)
    """

    def __init__(
        self,
        vocab_size: int,
        activation: str = "gelu",
        tie_embeddings: bool = True,
        layer_norm_epsilon: float = 1e-6,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.vocab_size = vocab_size
        self.activation = activation
        self.tie_embeddings = tie_embeddings
        self.layer_norm_epsilon = layer_norm_epsilon

    def build(self, input_shape):
        embed_dim = input_shape[-1]
        self.transform = layers.Dense(embed_dim, activation=self.activation, name="transform", dtype=self.dtype_policy)
        self.transform.build(input_shape)
        self.norm = layers.LayerNormalization(epsilon=self.layer_norm_epsilon, name="norm", dtype=self.dtype_policy)
        self.norm.build(input_shape)
        if self.tie_embeddings:
            self.output_bias = self.add_weight(shape=(self.vocab_size,), initializer="zeros", name="output_bias")
        else:
            self.output_dense = layers.Dense(self.vocab_size, name="output_dense", dtype=self.dtype_policy)
            self.output_dense.build(input_shape)
        self.built = True

    def call(self, hidden, embedding_matrix=None):
        x = self.norm(self.transform(hidden))
        if not self.tie_embeddings:
            return ops.cast(self.output_dense(x), "float32")
        if embedding_matrix is None:
            raise ValueError("MaskedLMHead(tie_embeddings=True) needs embedding_matrix=(vocab_size, embed_dim)")
        logits = ops.matmul(x, ops.transpose(ops.cast(embedding_matrix, x.dtype)))
        return ops.cast(logits, "float32") + ops.cast(self.output_bias, "float32")

    def compute_output_shape(self, input_shape):
        return tuple(input_shape[:-1]) + (self.vocab_size,)

    def compute_output_spec(self, hidden, embedding_matrix=None):
        return keras.KerasTensor(self.compute_output_shape(hidden.shape), dtype="float32")  # as call returns

    def get_config(self):
        config = super().get_config()
        config.update(
            vocab_size=self.vocab_size,
            activation=self.activation,
            tie_embeddings=self.tie_embeddings,
            layer_norm_epsilon=self.layer_norm_epsilon,
        )
        return config


def _task_config(model, **values) -> dict:
    return {
        "name": model.name,
        "trainable": model.trainable,
        "backbone": keras.layers.serialize(model.backbone),
        **values,
    }


def _with_backbone(config: dict) -> dict:
    """``from_config``'s arguments: the backbone deserialised."""
    config = {key: value for key, value in config.items() if key != "dtype"}
    config["backbone"] = keras.layers.deserialize(config["backbone"])
    return config


@keras.saving.register_keras_serializable(package=PACKAGE)
class MaskedLanguageModel(keras.Model):
    """A :class:`MaskedLMHead` on a backbone: the words at the masked positions.

    Inputs: ``{"token_ids": (batch, T), "mask_positions": (batch, P)}``; output: float32 logits
    ``(batch, P, vocab_size)`` at those positions. Written as a subclassed model because the tied
    output projection reads the token embedding's matrix, which a functional graph cannot pass
    between layers; ``get_config`` / ``build`` make it round-trip through ``model.save``.

    Example:
    >>> backbone = EncoderBackbone(vocab_size=50, max_len=8, embed_dim=8, num_layers=1, num_heads=2,
    ...                            key_dim=4, ff_dim=8)
    >>> mlm = MaskedLanguageModel(backbone)
    >>> out = mlm({"token_ids": ops.ones((2, 8), "int32"), "mask_positions": ops.zeros((2, 3), "int32")})
    >>> tuple(out.shape)
    (2, 3, 50)
    """

    def __init__(self, backbone: EncoderBackbone, tie_embeddings: bool = True, **kwargs):
        super().__init__(**kwargs)
        self.backbone = backbone
        self.tie_embeddings = tie_embeddings
        self.head = MaskedLMHead(
            backbone.arguments["vocab_size"],
            activation=backbone.arguments["activation"],
            tie_embeddings=tie_embeddings,
            dtype=backbone.dtype_policy,
            name="mlm_head",
        )

    def build(self, input_shape=None):
        self.head.build((None, None, self.backbone.arguments["embed_dim"]))
        self.built = True

    def call(self, inputs, training=None):
        x = self.backbone(inputs["token_ids"], training=training)
        positions = ops.cast(inputs["mask_positions"], "int32")
        if self.backbone.arguments["cls_token"]:
            positions = positions + 1  # the encoder's output has [CLS] at position 0
        if keras.backend.backend() == "tensorflow":
            # tf.gather rather than ops.take_along_axis, whose TensorFlow version builds int64 indices that
            # oneDNN rejects with an error line on stderr (it then falls back, same result).
            hidden = tf.gather(x, positions, batch_dims=1)
        else:
            hidden = ops.take_along_axis(x, positions[:, :, None], axis=1)
        matrix = self.backbone.token_embedding.embeddings if self.tie_embeddings else None
        return self.head(hidden, embedding_matrix=matrix)

    def get_config(self):
        return _task_config(self, tie_embeddings=self.tie_embeddings)

    @classmethod
    def from_config(cls, config):
        return cls(**_with_backbone(config))


@keras.saving.register_keras_serializable(package=PACKAGE)
class ReplacedTokenDetector(keras.Model):
    """ELECTRA (Clark et al. 2020): a small masked-LM *generator* fills the masked positions with its own
    samples; the *discriminator*, a backbone with a per-token head, learns for every token whether it was
    replaced. Every token gives the discriminator a signal, not only the 15% that are masked, and the
    vocabulary-sized softmax is paid by the small generator only.

    Trained with its own ``train_step`` (two losses, a sampling step between them; Keras has no built-in
    model for it). ``loss = masked_lm_loss + discriminator_weight * replaced_loss`` (ELECTRA: 50).

    Inputs as :class:`MaskedLanguageModel` (the same masked batches); ``call`` returns the
    discriminator's per-token "replaced" logits ``(batch, T)``; ``self.generator`` fills ``[MASK]``.
    The generator has the backbone's depth and ``generator_size`` of its width (ELECTRA: 1/4 to 1/2).

    Example:
    >>> backbone = EncoderBackbone(vocab_size=50, max_len=8, embed_dim=8, num_layers=1, num_heads=2,
    ...                            key_dim=4, ff_dim=8)
    >>> rtd = ReplacedTokenDetector(backbone)
    >>> tuple(rtd({"token_ids": ops.ones((2, 8), "int32"), "mask_positions": ops.zeros((2, 3), "int32")}).shape)
    (2, 8)
    """

    def __init__(
        self,
        backbone: EncoderBackbone,
        tie_embeddings: bool = True,
        generator_size: float = 0.25,
        discriminator_weight: float = 50.0,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.backbone = backbone
        self.tie_embeddings = tie_embeddings
        self.generator_size = generator_size
        self.discriminator_weight = discriminator_weight
        arguments = backbone.arguments
        self.replaced_transform = layers.Dense(
            arguments["embed_dim"],
            activation=arguments["activation"],
            dtype=backbone.dtype_policy,
            name="replaced_transform",
        )
        self.replaced_logit = layers.Dense(1, dtype="float32", name="replaced_logit")
        narrow = dict(
            embed_dim=max(8, int(arguments["embed_dim"] * generator_size)),
            num_heads=max(1, int(arguments["num_heads"] * generator_size)),
            ff_dim=max(8, int(arguments["ff_dim"] * generator_size)),
            value_dim=None,
            name="generator_backbone",
        )
        generator_backbone = EncoderBackbone(**{**arguments, **narrow}, dtype=backbone.dtype_policy)
        self.generator = MaskedLanguageModel(
            generator_backbone, tie_embeddings=tie_embeddings, dtype=backbone.dtype_policy, name="generator"
        )
        self.trackers = {
            name: keras.metrics.Mean(name=name)
            for name in ("loss", "masked_lm_loss", "replaced_loss", "masked_accuracy", "replaced_accuracy")
        }

    @property
    def metrics(self):
        return list(self.trackers.values())

    def build(self, input_shape=None):
        embed_dim = self.backbone.arguments["embed_dim"]
        self.replaced_transform.build((None, None, embed_dim))
        self.replaced_logit.build((None, None, embed_dim))
        self.generator.build()
        self.built = True

    def discriminate(self, token_ids, training=None):
        """Per-token logits that the token was replaced, ``(batch, T)``."""
        x = self.backbone(token_ids, training=training)
        if self.backbone.arguments["cls_token"]:
            x = x[:, 1:, :]
        return self.replaced_logit(self.replaced_transform(x))[:, :, 0]

    def call(self, inputs, training=None):
        return self.discriminate(inputs["token_ids"], training=training)

    def get_config(self):
        return _task_config(
            self,
            tie_embeddings=self.tie_embeddings,
            generator_size=self.generator_size,
            discriminator_weight=self.discriminator_weight,
        )

    @classmethod
    def from_config(cls, config):
        return cls(**_with_backbone(config))

    def train_step(self, data):
        inputs, targets, weights = data
        real = inputs["token_ids"] != 0
        with tf.GradientTape() as tape:
            logits = self.generator(inputs, training=True)  # (batch, P, vocab)
            per_token = keras.losses.sparse_categorical_crossentropy(targets, logits, from_logits=True)
            masked_lm_loss = tf.reduce_sum(per_token * weights) / tf.maximum(tf.reduce_sum(weights), 1.0)
            # The generator's guesses replace the chosen tokens; no gradient flows through the sampling.
            sampled = tf.random.categorical(tf.reshape(tf.stop_gradient(logits), (-1, tf.shape(logits)[-1])), 1)
            sampled = tf.reshape(tf.cast(sampled, tf.int32), tf.shape(targets))
            corrupted, replaced = replace_with_samples(inputs, targets, weights, sampled)
            replaced_logits = self.discriminate(corrupted, training=True)
            real_weights = tf.cast(real, tf.float32)
            per_position = tf.nn.sigmoid_cross_entropy_with_logits(labels=replaced, logits=replaced_logits)
            replaced_loss = tf.reduce_sum(per_position * real_weights) / tf.maximum(tf.reduce_sum(real_weights), 1.0)
            loss = masked_lm_loss + self.discriminator_weight * replaced_loss
        gradients = tape.gradient(loss, self.trainable_variables)
        self.optimizer.apply(gradients, self.trainable_variables)

        guessed = tf.cast(tf.argmax(logits, axis=-1, output_type=tf.int32) == targets, tf.float32)
        detected = tf.cast((replaced_logits > 0) == (replaced > 0.5), tf.float32)
        self.trackers["loss"].update_state(loss)
        self.trackers["masked_lm_loss"].update_state(masked_lm_loss)
        self.trackers["replaced_loss"].update_state(replaced_loss)
        self.trackers["masked_accuracy"].update_state(guessed, sample_weight=weights)
        self.trackers["replaced_accuracy"].update_state(detected, sample_weight=real_weights)
        return {name: tracker.result() for name, tracker in self.trackers.items()}


def replace_with_samples(inputs, targets, weights, sampled):
    """ELECTRA's corrupted input: the original text with the generator's ``sampled`` words at the masked
    positions, and per token 1.0 where the word differs from the original (a correct guess counts as
    original, as in ELECTRA), else 0.0.

    Args (as :func:`masked_lm_dataset` yields them): ``inputs`` with ``token_ids`` (masked) and
    ``mask_positions`` ``(batch, P)``; ``targets`` the original ids there; ``weights`` 1.0 at chosen
    positions; ``sampled`` ``(batch, P)`` the generator's words.
    """
    masked = tf.cast(inputs["token_ids"], tf.int32)
    positions = tf.cast(inputs["mask_positions"], tf.int32)
    shape = tf.shape(masked)
    rows = tf.broadcast_to(tf.range(shape[0])[:, None], tf.shape(positions))
    index = tf.stack([rows, positions], axis=-1)
    keep = tf.cast(weights > 0, tf.int32)  # positions beyond a text's chosen count are not masked
    chosen = tf.scatter_nd(index, keep, shape) > 0
    originals = tf.where(chosen, tf.scatter_nd(index, tf.cast(targets, tf.int32) * keep, shape), masked)
    corrupted = tf.where(chosen, tf.scatter_nd(index, tf.cast(sampled, tf.int32) * keep, shape), masked)
    return corrupted, tf.cast(corrupted != originals, tf.float32)


def build_pretrainer(backbone_cfg, pretrain_cfg, vocab_size: int):
    """The stage's model for ``pretrain.objective``, on a backbone as ``backbone_cfg`` (``model.backbone``) builds
    it, with the stage's dropout (and attention dropout 0): :class:`MaskedLanguageModel` (mlm) or
    :class:`ReplacedTokenDetector` (electra); built."""
    from mha_project.config import build

    backbone = build(backbone_cfg, vocab_size=vocab_size, dropout=pretrain_cfg.dropout, attention_dropout=0.0)
    if pretrain_cfg.objective == "mlm":
        model = MaskedLanguageModel(
            backbone, tie_embeddings=pretrain_cfg.tie_embeddings, dtype=backbone.dtype_policy, name="masked_lm"
        )
    else:
        model = ReplacedTokenDetector(
            backbone,
            tie_embeddings=pretrain_cfg.tie_embeddings,
            generator_size=float(pretrain_cfg.generator_size),
            discriminator_weight=float(pretrain_cfg.discriminator_weight),
            dtype=backbone.dtype_policy,
            name="electra",
        )
    model.build()
    return model
