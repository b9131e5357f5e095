"""Self-pretraining: a masked-language-model stage on the task's own training texts, then fine-tuning.

    python scripts/train.py pretrain=mlm                  # pretrain, then fine-tune, in one run directory
    python scripts/train.py pretrain.from=outputs/runs/A  # fine-tune from run A's pretrained encoder

The stage (BERT's objective, Devlin et al. 2019; "self-pretraining" on the downstream texts only,
Krishna et al. 2023) trains the *same* encoder layers the classifier uses (``embedding``,
``encoder_{i}``, ``final_norm``: same classes, same names) to predict masked words, on the training
split only (never validation or test). The classifier is then built as usual and those layers' weights
are copied in before fine-tuning. Its files live under ``RUN_DIR/pretrain/``::

    history.csv     loss, masked_accuracy, perplexity, elapsed_seconds per epoch
    backup/         resume state (BackupAndRestore), as for fine-tuning
    tensorboard/    the stage's scalars, attention images / entropy, and fill-mask probes (Text tab)
    model.keras     the masked language model (encoder + MaskedLMHead), for scripts/fill_mask.py

Masking (:func:`mask_batch`) is BERT's: ``mask_rate`` of each text's real tokens (at least one; padding
never), of which 80% become ``[MASK]``, 10% a random word and 10% stay; the loss is taken only at those
positions. New positions every epoch: the random seed of each batch comes from
``tf.data.Dataset.random(rerandomize_each_iteration=True)``.
"""

from __future__ import annotations

import logging
import math
import re
import time
from pathlib import Path

import keras
import numpy as np
from keras import layers, ops

from mha_project.config import OBJECTIVES  # noqa: F401  (none | mlm: the pretrain options)
from mha_project.errors import ConfigError, UserError
from mha_project.layers import PACKAGE, EncoderBlock, MaskedLMHead, TokenAndPositionEmbedding

log = logging.getLogger(__name__)

MASK_TOKEN = "[MASK]"
STAGE_DIR = "pretrain"
MODEL_FILE = "model.keras"
# The classifier's layers that the masked LM trains (same names in both models).
ARCHITECTURE_KEYS = (
    "num_layers",
    "num_heads",
    "key_dim",
    "value_dim",
    "embed_dim",
    "ff_dim",
    "max_len",
    "activation",
    "use_bias",
    "norm_first",
    "embedding_norm",
    "position_encoding",
)


def uses_pretraining(cfg) -> bool:
    """Whether this run pretrains (``pretrain=mlm``) or starts from a pretrained run (``pretrain.from``)."""
    return cfg.pretrain.objective != "none" or bool(cfg.pretrain["from"])


# ----------------------------------------------------------------------------------------------
# Vocabulary and masking
# ----------------------------------------------------------------------------------------------


def with_mask_token(words: list[str], vocab_size: int) -> list[str]:
    """The adapted words (no padding / ``[UNK]``) with ``[MASK]`` as the last id, within ``vocab_size`` ids.

    ``[MASK]`` takes the place of the least frequent word, so the embedding table keeps the size it has
    without pretraining. Text never produces it: the default standardisation strips the brackets.

    >>> with_mask_token(["the", "a", "of"], vocab_size=5)
    ['the', 'a', '[MASK]']
    """
    words = [w for w in words if w != MASK_TOKEN]
    return words[: vocab_size - 3] + [MASK_TOKEN]


def mask_id_of(vectorizer) -> int:
    vocabulary = vectorizer.get_vocabulary()
    if MASK_TOKEN not in vocabulary:
        raise UserError(f"the vocabulary has no {MASK_TOKEN} token: it was not built for masked-LM pretraining")
    return vocabulary.index(MASK_TOKEN)


def mask_batch(ids, seed, rate: float, mask_id: int):
    """BERT masking of a padded batch of token ids.

    Per text ``max(1, round(rate * length))`` distinct real positions are chosen (padding, id 0, never);
    of those 80% become ``mask_id``, 10% a random word id in ``[2, mask_id)`` and 10% keep their token.

    Args:
        ids: ``(batch, T)`` int32 token ids, 0 = padding.
        seed: ``(2,)`` int seed for the stateless random ops (same seed, same masks).
        rate: fraction of each text's tokens to predict.
        mask_id: id of ``[MASK]`` (the last id of the vocabulary; the words are ``2 .. mask_id-1``).
    Returns:
        ``(masked_ids, positions, targets, weights)``: the input with replacements; ``(batch, P)``
        chosen positions (P = the most chosen in any row); the original ids there; 1.0 where a
        position was chosen, 0.0 where a row has fewer than P.
    """
    import tensorflow as tf

    ids = tf.cast(ids, tf.int32)
    seeds = tf.random.experimental.stateless_split(tf.cast(seed, tf.int64), num=4)
    real = ids != 0
    lengths = tf.reduce_sum(tf.cast(real, tf.int32), axis=1)
    chosen = tf.cast(tf.round(tf.cast(lengths, tf.float32) * rate), tf.int32)
    chosen = tf.where(lengths > 0, tf.maximum(chosen, 1), 0)
    num = tf.maximum(tf.reduce_max(chosen), 1)
    # Random scores with padding below every real token: top_k picks distinct real positions first.
    score = tf.where(real, tf.random.stateless_uniform(tf.shape(ids), seed=seeds[0]), -1.0)
    _, positions = tf.math.top_k(score, k=num)
    weights = tf.range(num)[None, :] < chosen[:, None]
    targets = tf.gather(ids, positions, batch_dims=1)
    roll = tf.random.stateless_uniform(tf.shape(positions), seed=seeds[1])
    random_words = tf.random.stateless_uniform(
        tf.shape(positions), seed=seeds[2], minval=2, maxval=max(mask_id, 3), dtype=tf.int32
    )
    replaced = tf.where(roll < 0.8, mask_id, tf.where(roll < 0.9, random_words, targets))
    replaced = tf.where(weights, replaced, targets)
    rows = tf.broadcast_to(tf.range(tf.shape(ids)[0])[:, None], tf.shape(positions))
    masked = tf.tensor_scatter_nd_update(ids, tf.stack([rows, positions], axis=-1), replaced)
    return masked, positions, tf.where(weights, targets, 0), tf.cast(weights, tf.float32)


def masked_lm_dataset(batches, *, rate: float, mask_id: int, seed: int):
    """(ids, label) batches -> ({token_ids, mask_positions}, targets, sample weights), new masks every epoch."""
    import tensorflow as tf

    # Stateful random ops in a tf.data map replay the same numbers every epoch when a seed is set;
    # Dataset.random with rerandomize_each_iteration gives each epoch (iterator) new seeds instead.
    seeds = tf.data.Dataset.random(seed=seed, rerandomize_each_iteration=True)

    def to_example(batch, random):
        ids, _ = batch
        masked, positions, targets, weights = mask_batch(ids, tf.stack([random, random // 7 + 1]), rate, mask_id)
        return {"token_ids": masked, "mask_positions": positions}, targets, weights

    ds = tf.data.Dataset.zip(batches, seeds).map(to_example, num_parallel_calls=tf.data.AUTOTUNE)
    return ds.apply(tf.data.experimental.assert_cardinality(batches.cardinality())).prefetch(tf.data.AUTOTUNE)


# ----------------------------------------------------------------------------------------------
# The masked language model
# ----------------------------------------------------------------------------------------------


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
        import tensorflow as tf

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
        import tensorflow as tf

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
    import tensorflow as tf

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


# ----------------------------------------------------------------------------------------------
# The stage
# ----------------------------------------------------------------------------------------------


def run_pretraining(cfg, stage_dir: Path, vectorizer, texts) -> dict:
    """Train the masked LM on ``texts`` (resuming from ``stage_dir/backup``); save it; return its summary."""
    from mha_project.callbacks import (
        AttentionLogger,
        EpochCounter,
        FillMaskLogger,
        Perplexity,
        ResumableBackup,
        StageCSVLogger,
    )
    from mha_project.data import pipeline_from_cfg
    from mha_project.history import backed_up_epochs, read_history, trim_history
    from mha_project.train import expected_end_of_data, save_model_atomic, warmup_cosine

    pcfg = cfg.pretrain
    stage_dir.mkdir(parents=True, exist_ok=True)
    mask_id = mask_id_of(vectorizer)
    batches = pipeline_from_cfg(
        cfg, texts, np.zeros(len(texts), "int32"), vectorizer, shuffle=True, batch_size=int(pcfg.batch_size)
    )
    dataset = masked_lm_dataset(batches, rate=float(pcfg.mask_rate), mask_id=mask_id, seed=int(cfg.seed))
    steps_per_epoch = int(dataset.cardinality())
    log.info(
        f"pretraining: {pcfg.objective} on {len(texts)} training texts · {pcfg.epochs} epoch(s) of {steps_per_epoch} "
        f"batches · mask rate {pcfg.mask_rate} · tied embeddings {pcfg.tie_embeddings}"
    )
    model = build_pretrainer(cfg.model, pcfg, vectorizer.vocabulary_size())
    optimizer = keras.optimizers.AdamW(
        learning_rate=warmup_cosine(pcfg.lr, pcfg.warmup_fraction, steps_per_epoch * pcfg.epochs),
        weight_decay=0.01,
        clipnorm=1.0,
    )
    if pcfg.objective == "mlm":
        model.compile(
            optimizer=optimizer,
            # The mean over the chosen positions only (rows with fewer than P carry weight 0).
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="mean_with_sample_weight"),
            weighted_metrics=[keras.metrics.SparseCategoricalAccuracy(name="masked_accuracy")],
            jit_compile=False,
        )
    else:  # electra: losses and metrics live in ReplacedTokenDetector.train_step
        model.compile(optimizer=optimizer, jit_compile=False)

    history_csv = stage_dir / "history.csv"
    previous = trim_history(history_csv, backed_up_epochs(stage_dir / "backup"))
    counter = EpochCounter(elapsed_offset=float(previous[-1].get("elapsed_seconds") or 0) if previous else 0.0)
    callbacks = [
        counter,
        Perplexity(),
        keras.callbacks.TerminateOnNaN(),
        StageCSVLogger(history_csv, append=True),
    ]
    if cfg.logger.tensorboard:
        tb_dir = stage_dir / "tensorboard"
        callbacks.append(keras.callbacks.TensorBoard(tb_dir, update_freq="epoch"))
        attention = cfg.logger.attention
        if attention.every_n_epochs > 0:
            probes = [t.replace(MASK_TOKEN, " ") for t in pcfg.probe_texts]
            callbacks.append(
                AttentionLogger(
                    tb_dir / "attention",
                    vectorizer,
                    probes,
                    int(cfg.data.seq_len),
                    attention.every_n_epochs,
                    max_tokens=attention.max_tokens,
                    classify=False,
                    truncation=cfg.data.truncation,
                )
            )
        if pcfg.probe_texts:
            callbacks.append(
                FillMaskLogger(
                    tb_dir / "fill_mask",
                    vectorizer,
                    list(pcfg.probe_texts),
                    int(cfg.data.seq_len),
                    truncation=cfg.data.truncation,
                )
            )
    callbacks.append(ResumableBackup(stage_dir / "backup", history_csv))

    start = time.perf_counter()
    with expected_end_of_data():
        history = model.fit(
            dataset,
            epochs=int(pcfg.epochs),
            callbacks=callbacks,
            shuffle=False,  # tf.data reshuffles every epoch with the seed
            verbose="auto" if _isatty() else 2,
        )
    seconds_now = time.perf_counter() - start
    losses = history.history.get("loss", [])
    if losses and not all(np.isfinite(losses)):
        raise UserError(
            f"pretraining diverged: the {pcfg.objective} loss became NaN/inf with pretrain.lr={pcfg.lr}; "
            "try a smaller pretrain.lr"
        )
    save_model_atomic(model, stage_dir / MODEL_FILE)
    rows = read_history(history_csv)
    last = rows[-1] if rows else {}
    return {
        "objective": str(pcfg.objective),
        "epochs": len(rows),
        "texts": len(texts),
        "masked_lm_loss": _float(last.get("masked_lm_loss", last.get("loss"))),
        "masked_accuracy": _float(last.get("masked_accuracy")),
        "replaced_accuracy": _float(last.get("replaced_accuracy")),
        "perplexity": _float(last.get("perplexity")),
        "seconds": round(counter.elapsed_offset + seconds_now, 3),
        "from": None,
    }


def _float(value):
    return None if value in (None, "") else float(value)


def _isatty() -> bool:
    import sys

    return sys.stdout.isatty()


def load_masked_lm(run_dir):
    """The model saved by a run's pretraining stage (``RUN_DIR/pretrain/model.keras``): a
    :class:`MaskedLanguageModel` or a :class:`ReplacedTokenDetector` (whose ``generator`` fills masks)."""
    from mha_project.run import load_model_safely

    path = Path(run_dir) / STAGE_DIR / MODEL_FILE
    if not path.is_file():
        raise UserError(
            f"{run_dir} has no masked-LM stage (no {STAGE_DIR}/{MODEL_FILE}): it was trained with pretrain=none, "
            "or its pretraining has not finished; train one with: python scripts/train.py pretrain=mlm"
        )
    return load_model_safely(path)


def check_pretrained_source(source, cfg, vectorizer) -> dict:
    """For ``pretrain.from=SOURCE``: the source's pretraining summary, after checking that its encoder
    fits this run (same architecture, same vocabulary); a mismatch is a one-line ConfigError."""
    import json

    from omegaconf import OmegaConf

    from mha_project.data import read_vocabulary

    source = Path(source)
    shown = f"pretrain.from={source}"
    config_file = source / ".hydra" / "config.yaml"
    if not config_file.is_file():
        raise ConfigError(f"{shown} is not a run directory (no .hydra/config.yaml)")
    if not (source / STAGE_DIR / MODEL_FILE).is_file():
        raise ConfigError(
            f"{shown} has no finished masked-LM stage (no {STAGE_DIR}/{MODEL_FILE}); "
            "pretrain one with: python scripts/train.py pretrain=mlm"
        )
    theirs = OmegaConf.load(config_file)
    for key in ARCHITECTURE_KEYS:
        there, here = theirs.model.get(key), cfg.model.get(key)
        if key == "position_encoding":  # runs from before the option had learned positions
            there, here = there or "learned", here or "learned"
        if there != here:
            raise ConfigError(
                f"{shown} has another encoder: model.{key}={_show(there)} there, {_show(here)} here; "
                "fine-tune with the architecture it was pretrained with"
            )
    if (theirs.model.pooling == "cls") != (cfg.model.pooling == "cls"):
        raise ConfigError(
            f"{shown} has another encoder: model.pooling={theirs.model.pooling} there, {cfg.model.pooling} here "
            "(a [CLS] position exists only with pooling=cls)"
        )
    their_vocab = read_vocabulary(source / "vocab.txt")
    our_vocab = vectorizer.get_vocabulary(include_special_tokens=False)
    if their_vocab != our_vocab:
        first = next((i for i, (a, b) in enumerate(zip(their_vocab, our_vocab)) if a != b), None)
        where = (
            ""
            if first is None
            else f"; first difference at id {first + 2}: {their_vocab[first]!r} vs {our_vocab[first]!r}"
        )
        raise ConfigError(
            f"{shown} has another vocabulary: {len(their_vocab) + 2} tokens from data={theirs.data.name} there, "
            f"{len(our_vocab) + 2} from data={cfg.data.name} here{where}; fine-tune on the data it was pretrained on"
        )
    record = json.loads((source / "run.json").read_text()) if (source / "run.json").is_file() else {}
    summary = dict((record.get("results") or {}).get("pretrain") or {"objective": "mlm"})
    summary["from"] = str(source)
    return summary


def _show(value) -> str:
    return "null" if value is None else str(value)


# ----------------------------------------------------------------------------------------------
# Filling in [MASK]
# ----------------------------------------------------------------------------------------------


def encode_masked_text(text: str, vectorizer, seq_len: int, truncation: str = "head") -> np.ndarray:
    """Token ids of ``text`` with each ``[MASK]`` (any letter case) as the mask id; truncated to seq_len
    as training truncates (``data.truncation``)."""
    import tensorflow as tf

    from mha_project.data import truncate_token_ids

    pieces = re.split(r"\[mask\]", text, flags=re.IGNORECASE)
    if len(pieces) == 1:
        raise UserError(f"text {text!r} has no {MASK_TOKEN}: write {MASK_TOKEN} where a word should be predicted")
    mask_id = mask_id_of(vectorizer)
    ids: list[int] = []
    for i, piece in enumerate(pieces):
        if i:
            ids.append(mask_id)
        if piece.strip():
            ids.extend(int(t) for t in vectorizer(np.asarray([piece], dtype=object)).numpy()[0])
    kept = truncate_token_ids(tf.ragged.constant([ids], dtype=tf.int64), seq_len, truncation)[0].numpy()
    if mask_id not in kept:
        raise UserError(
            f"every {MASK_TOKEN} in the text lies outside the {seq_len} tokens the model reads "
            f"(data.seq_len={seq_len}, data.truncation={truncation})"
        )
    return kept.astype("int32")


def fill_mask(
    model, vectorizer, text: str, seq_len: int, top_k: int = 5, truncation: str = "head"
) -> list[list[tuple[str, float]]]:
    """For each ``[MASK]`` in ``text``: the ``top_k`` words with their probabilities."""
    ids = encode_masked_text(text, vectorizer, seq_len, truncation)  # checks that there is a [MASK] id
    vocabulary = vectorizer.get_vocabulary()
    mask_id = vocabulary.index(MASK_TOKEN)
    positions = np.flatnonzero(ids == mask_id).astype("int32")
    model = getattr(model, "generator", model)  # ELECTRA: its generator is the masked LM
    logits = model({"token_ids": ids[None, :], "mask_positions": positions[None, :]}, training=False)
    logits = np.asarray(ops.convert_to_numpy(logits), "float64")[0]
    logits[:, [0, mask_id]] = -np.inf  # padding and [MASK] are never the answer
    probs = np.exp(logits - logits.max(axis=-1, keepdims=True))
    probs /= probs.sum(axis=-1, keepdims=True)
    top = np.argsort(-probs, axis=-1)[:, :top_k]
    return [[(vocabulary[j], float(p[j])) for j in row] for row, p in zip(top, probs)]


def perplexity(loss: float) -> float:
    return float(math.exp(min(loss, 50.0)))


def fill_mask_in_run(run_dir, text: str, top_k: int = 5) -> list[list[tuple[str, float]]]:
    """:func:`fill_mask` with a run directory's masked LM, vocabulary and seq_len."""
    from omegaconf import OmegaConf

    from mha_project.data import make_vectorizer, read_vocabulary, truncation_of

    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise UserError(f"run dir {run_dir} does not exist or is not a directory")
    if not (run_dir / ".hydra" / "config.yaml").is_file():
        raise UserError(f"{run_dir} is not a run directory: no .hydra/config.yaml")
    cfg = OmegaConf.load(run_dir / ".hydra" / "config.yaml")
    source = (cfg.get("pretrain") or {}).get("from")
    if source and not (run_dir / STAGE_DIR / MODEL_FILE).is_file():
        raise UserError(
            f"{run_dir} did not pretrain: its encoder came from pretrain.from={source}; "
            f"ask that run: python scripts/fill_mask.py {source} ..."
        )
    if "[mask]" not in text.lower():  # before the model loads: a typo gets its answer at once
        raise UserError(f"text {text!r} has no {MASK_TOKEN}: write {MASK_TOKEN} where a word should be predicted")
    model = load_masked_lm(run_dir)
    vectorizer = make_vectorizer(None, int(cfg.data.vocab_size), vocabulary=read_vocabulary(run_dir / "vocab.txt"))
    return fill_mask(model, vectorizer, text, int(cfg.data.seq_len), top_k, truncation_of(cfg.data))
