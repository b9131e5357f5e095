"""The pretraining models: a masked language model and ELECTRA's replaced-token detector."""

from __future__ import annotations

import keras
import tensorflow as tf
from keras import layers, ops

from mha_project.model.heads import MaskedLMHead
from mha_project.model.layers import PACKAGE, EncoderBlock, TokenAndPositionEmbedding


class PretrainingEncoder(keras.Model):
    """The classifier's encoder (same layer classes, same names: ``embedding``, ``encoder_{i}``,
    ``final_norm``), for the pretraining models below to put their heads on; ``config_values`` holds the
    constructor's arguments (``get_config``). Not registered: only its subclasses are saved."""

    def _make_encoder(self, **config):
        self.config_values = dict(config)
        rotary = config.get("position_encoding", "learned") == "rotary"  # models saved before the option: learned
        self.embedding = TokenAndPositionEmbedding(
            config["vocab_size"],
            config["max_len"],
            config["embed_dim"],
            cls_token=config["cls_token"],
            input_scale=config["embedding_norm"],
            learned_positions=not rotary,
            name="embedding",
        )
        self.embedding_dropout = layers.Dropout(config["dropout"], name="embedding_dropout")
        self.blocks = [
            EncoderBlock(
                num_heads=config["num_heads"],
                key_dim=config["key_dim"],
                value_dim=config["value_dim"],
                ff_dim=config["ff_dim"],
                dropout=config["dropout"],
                attention_dropout=0.0,  # Keras's fused attention path (README "Speed")
                activation=config["activation"],
                use_bias=config["use_bias"],
                norm_first=config["norm_first"],
                rotary_positions=rotary,
                name=f"encoder_{i}",
            )
            for i in range(config["num_layers"])
        ]
        norm = layers.LayerNormalization(epsilon=1e-6, name="final_norm") if config["norm_first"] else None
        self.final_norm = norm

    def _build_encoder(self):
        embed_dim = self.config_values["embed_dim"]
        self.embedding.build((None, None))
        for block in self.blocks:
            block.build((None, None, embed_dim))
        if self.final_norm is not None:
            self.final_norm.build((None, None, embed_dim))

    def encode(self, token_ids, training=None):
        """The encoder's outputs ``(batch, T[+1 with CLS], embed_dim)``, as the classifier computes them."""
        mask = self.embedding.compute_mask(token_ids)
        x = self.embedding_dropout(self.embedding(token_ids), training=training)
        for block in self.blocks:
            x = block(x, mask=mask, training=training)
        return x if self.final_norm is None else self.final_norm(x)

    def get_config(self):
        config = super().get_config()
        config.update(self.config_values)
        return config

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        for key in ("trainable", "dtype"):
            config.pop(key, None)
        return cls(**config)


@keras.saving.register_keras_serializable(package=PACKAGE)
class MaskedLanguageModel(PretrainingEncoder):
    """The classifier's encoder (same layer classes and names) with a :class:`MaskedLMHead`.

    Inputs: ``{"token_ids": (batch, T), "mask_positions": (batch, P)}``; output: float32 logits
    ``(batch, P, vocab_size)`` at those positions. Written as a subclassed model because the tied
    output projection reads the token embedding's matrix, which a functional graph cannot pass
    between layers; ``get_config`` / ``build`` make it round-trip through ``model.save``.

    Example:
    >>> mlm = MaskedLanguageModel(vocab_size=50, max_len=8, embed_dim=8, num_layers=1, num_heads=2,
    ...                           key_dim=4, ff_dim=8)
    >>> out = mlm({"token_ids": ops.ones((2, 8), "int32"), "mask_positions": ops.zeros((2, 3), "int32")})
    >>> tuple(out.shape)
    (2, 3, 50)
    """

    def __init__(
        self,
        vocab_size: int,
        max_len: int,
        embed_dim: int,
        num_layers: int,
        num_heads: int,
        key_dim: int,
        ff_dim: int,
        value_dim: int | None = None,
        dropout: float = 0.1,
        activation: str = "gelu",
        use_bias: bool = True,
        norm_first: bool = False,
        embedding_norm: str = "layer_norm",
        position_encoding: str = "learned",
        cls_token: bool = False,
        tie_embeddings: bool = True,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self._make_encoder(
            vocab_size=vocab_size,
            max_len=max_len,
            embed_dim=embed_dim,
            num_layers=num_layers,
            num_heads=num_heads,
            key_dim=key_dim,
            ff_dim=ff_dim,
            value_dim=value_dim,
            dropout=dropout,
            activation=activation,
            use_bias=use_bias,
            norm_first=norm_first,
            embedding_norm=embedding_norm,
            position_encoding=position_encoding,
            cls_token=cls_token,
            tie_embeddings=tie_embeddings,
        )
        self.head = MaskedLMHead(vocab_size, activation=activation, tie_embeddings=tie_embeddings, name="mlm_head")

    def build(self, input_shape=None):
        self._build_encoder()
        self.head.build((None, None, self.config_values["embed_dim"]))
        self.built = True

    def call(self, inputs, training=None):
        x = self.encode(inputs["token_ids"], training=training)
        positions = ops.cast(inputs["mask_positions"], "int32")
        if self.config_values["cls_token"]:
            positions = positions + 1  # the encoder's output has [CLS] at position 0
        # tf.gather rather than ops.take_along_axis, whose TensorFlow version builds int64 indices that
        # oneDNN rejects with an error line on stderr (it then falls back, same result).
        hidden = tf.gather(x, positions, batch_dims=1)
        matrix = self.embedding.token_embedding.embeddings if self.config_values["tie_embeddings"] else None
        return self.head(hidden, embedding_matrix=matrix)


@keras.saving.register_keras_serializable(package=PACKAGE)
class ReplacedTokenDetector(PretrainingEncoder):
    """ELECTRA (Clark et al. 2020): a small masked-LM *generator* fills the masked positions with its own
    samples; the *discriminator*, the classifier's encoder (same layer classes and names), learns for
    every token whether it was replaced. Every token gives the discriminator a signal, not only the 15%
    that are masked, and the vocabulary-sized softmax is paid by the small generator only.

    Trained with its own ``train_step`` (two losses, a sampling step between them; Keras has no built-in
    model for it). ``loss = masked_lm_loss + discriminator_weight * replaced_loss`` (ELECTRA: 50).

    Inputs as :class:`MaskedLanguageModel` (the same masked batches); ``call`` returns the
    discriminator's per-token "replaced" logits ``(batch, T)``; ``self.generator`` fills ``[MASK]``.

    Example:
    >>> rtd = ReplacedTokenDetector(vocab_size=50, max_len=8, embed_dim=8, num_layers=1, num_heads=2,
    ...                             key_dim=4, ff_dim=8)
    >>> tuple(rtd({"token_ids": ops.ones((2, 8), "int32"), "mask_positions": ops.zeros((2, 3), "int32")}).shape)
    (2, 8)
    """

    def __init__(
        self,
        vocab_size: int,
        max_len: int,
        embed_dim: int,
        num_layers: int,
        num_heads: int,
        key_dim: int,
        ff_dim: int,
        value_dim: int | None = None,
        dropout: float = 0.1,
        activation: str = "gelu",
        use_bias: bool = True,
        norm_first: bool = False,
        embedding_norm: str = "layer_norm",
        position_encoding: str = "learned",
        cls_token: bool = False,
        tie_embeddings: bool = True,
        generator_size: float = 0.25,
        discriminator_weight: float = 50.0,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self._make_encoder(
            vocab_size=vocab_size,
            max_len=max_len,
            embed_dim=embed_dim,
            num_layers=num_layers,
            num_heads=num_heads,
            key_dim=key_dim,
            ff_dim=ff_dim,
            value_dim=value_dim,
            dropout=dropout,
            activation=activation,
            use_bias=use_bias,
            norm_first=norm_first,
            embedding_norm=embedding_norm,
            position_encoding=position_encoding,
            cls_token=cls_token,
            tie_embeddings=tie_embeddings,
            generator_size=generator_size,
            discriminator_weight=discriminator_weight,
        )
        self.replaced_transform = layers.Dense(embed_dim, activation=activation, name="replaced_transform")
        self.replaced_logit = layers.Dense(1, dtype="float32", name="replaced_logit")
        # The generator: same depth, `generator_size` of the width (ELECTRA: 1/4 to 1/2 works best).
        self.generator = MaskedLanguageModel(
            vocab_size=vocab_size,
            max_len=max_len,
            embed_dim=max(8, int(embed_dim * generator_size)),
            num_layers=num_layers,
            num_heads=max(1, int(num_heads * generator_size)),
            key_dim=key_dim,
            ff_dim=max(8, int(ff_dim * generator_size)),
            dropout=dropout,
            activation=activation,
            use_bias=use_bias,
            norm_first=norm_first,
            embedding_norm=embedding_norm,
            position_encoding=position_encoding,
            cls_token=cls_token,
            tie_embeddings=tie_embeddings,
            name="generator",
        )
        self.trackers = {
            name: keras.metrics.Mean(name=name)
            for name in ("loss", "masked_lm_loss", "replaced_loss", "masked_accuracy", "replaced_accuracy")
        }

    @property
    def metrics(self):
        return list(self.trackers.values())

    def build(self, input_shape=None):
        embed_dim = self.config_values["embed_dim"]
        self._build_encoder()
        self.replaced_transform.build((None, None, embed_dim))
        self.replaced_logit.build((None, None, embed_dim))
        self.generator.build()
        self.built = True

    def discriminate(self, token_ids, training=None):
        """Per-token logits that the token was replaced, ``(batch, T)``."""
        x = self.encode(token_ids, training=training)
        if self.config_values["cls_token"]:
            x = x[:, 1:, :]
        return self.replaced_logit(self.replaced_transform(x))[:, :, 0]

    def call(self, inputs, training=None):
        return self.discriminate(inputs["token_ids"], training=training)

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
            loss = masked_lm_loss + self.config_values["discriminator_weight"] * replaced_loss
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


def build_pretrainer(model_cfg, pretrain_cfg, vocab_size: int):
    """The stage's model for ``pretrain.objective``, on an encoder shaped as ``model_cfg`` says:
    :class:`MaskedLanguageModel` (mlm) or :class:`ReplacedTokenDetector` (electra); built."""
    encoder = dict(
        vocab_size=vocab_size,
        max_len=model_cfg.max_len,
        embed_dim=model_cfg.embed_dim,
        num_layers=model_cfg.num_layers,
        num_heads=model_cfg.num_heads,
        key_dim=model_cfg.key_dim,
        value_dim=model_cfg.value_dim,
        ff_dim=model_cfg.ff_dim,
        dropout=pretrain_cfg.dropout,
        activation=model_cfg.activation,
        use_bias=model_cfg.use_bias,
        norm_first=model_cfg.norm_first,
        embedding_norm=model_cfg.embedding_norm,
        position_encoding=model_cfg.get("position_encoding", "learned"),
        cls_token=model_cfg.pooling == "cls",
        tie_embeddings=pretrain_cfg.tie_embeddings,
    )
    if pretrain_cfg.objective == "mlm":
        model = MaskedLanguageModel(**encoder, name="masked_lm")
    else:
        model = ReplacedTokenDetector(
            **encoder,
            generator_size=float(pretrain_cfg.generator_size),
            discriminator_weight=float(pretrain_cfg.discriminator_weight),
            name="electra",
        )
    model.build()
    return model


def encoder_layer_names(model) -> list[str]:
    """The layers a masked LM and a classifier share: embedding, encoder blocks, final_norm."""
    return [
        layer.name
        for layer in model.layers
        if layer.name == "embedding" or isinstance(layer, EncoderBlock) or layer.name == "final_norm"
    ]


def copy_encoder_weights(source, target) -> list[str]:
    """Copy the shared encoder layers' weights from ``source`` into ``target`` (by layer name)."""
    names = encoder_layer_names(target)
    for name in names:
        target.get_layer(name).set_weights(source.get_layer(name).get_weights())
    return names
