"""The layers on top of the encoder: poolings to one vector per text, and the masked-LM head."""

from __future__ import annotations

import keras
from keras import layers, ops

from mha_project.model import PACKAGE


class _MaskedPooling(layers.Layer):
    """Pools (batch, seq, dim) to (batch, dim) over real tokens; the pooled vector carries no mask."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.supports_masking = True

    def build(self, input_shape):
        self.built = True

    def compute_mask(self, inputs, mask=None):
        return None  # the pooled vector has no time axis left to mask

    def compute_output_shape(self, input_shape):
        return (input_shape[0], input_shape[-1])


@keras.saving.register_keras_serializable(package=PACKAGE)
class MaskedMeanPooling(_MaskedPooling):
    """Mean over the real tokens of each sequence: ``sum(x * mask) / max(1, sum(mask))``.

    Written here rather than using ``GlobalAveragePooling1D`` because that layer divides by zero
    (NaN) for a text with no tokens at all (an empty string, or one made only of punctuation).

    Example:
    >>> pool = MaskedMeanPooling()
    >>> x = ops.convert_to_tensor([[[1.0], [3.0], [100.0]]])
    >>> float(pool(x, mask=ops.convert_to_tensor([[True, True, False]]))[0, 0])
    2.0
    """

    def call(self, inputs, mask=None):
        if mask is None:
            return ops.mean(inputs, axis=1)
        weights = ops.cast(mask, inputs.dtype)[:, :, None]
        total = ops.sum(inputs * weights, axis=1)
        return total / ops.maximum(ops.sum(weights, axis=1), ops.cast(1.0, inputs.dtype))


@keras.saving.register_keras_serializable(package=PACKAGE)
class MaskedMaxPooling(_MaskedPooling):
    """Max over the real tokens of each sequence (0 for a sequence with no tokens).

    Keras's ``GlobalMaxPooling1D`` ignores the mask, so padding positions could win the max.

    Example (the second text has no real tokens):
    >>> x = ops.convert_to_tensor([[[1.0], [3.0], [100.0]], [[5.0], [6.0], [7.0]]])
    >>> mask = ops.convert_to_tensor([[True, True, False], [False, False, False]])
    >>> ops.convert_to_numpy(MaskedMaxPooling()(x, mask=mask))[:, 0].tolist()
    [3.0, 0.0]
    """

    def call(self, inputs, mask=None):
        if mask is None:
            return ops.max(inputs, axis=1)
        real = ops.cast(mask, "bool")[:, :, None]
        pooled = ops.max(ops.where(real, inputs, ops.cast(-1e9, inputs.dtype)), axis=1)
        has_tokens = ops.any(real, axis=1)
        return ops.where(has_tokens, pooled, ops.zeros_like(pooled))


@keras.saving.register_keras_serializable(package=PACKAGE)
class FirstTokenPooling(_MaskedPooling):
    """The vector at position 0 (the ``[CLS]`` token): the classifier then sees only what attention
    gathered there, so the [CLS] row of each head shows which words the decision rests on."""

    def call(self, inputs, mask=None):
        return inputs[:, 0, :]


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
