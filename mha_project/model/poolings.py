"""The poolings: the encoder's token vectors -> one vector per text, padding left out."""

from __future__ import annotations

import keras
from keras import layers, ops

from mha_project import PACKAGE


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
class LastTokenPooling(_MaskedPooling):
    """The vector at each text's last real token (padding is on the right): with a causal encoder
    (``model.backbone.causal``) the one position that has read the whole text.

    Example:
    >>> x = ops.convert_to_tensor([[[1.0], [3.0], [100.0]]])
    >>> float(LastTokenPooling()(x, mask=ops.convert_to_tensor([[True, True, False]]))[0, 0])
    3.0
    """

    def call(self, inputs, mask=None):
        if mask is None:
            return inputs[:, -1, :]
        last = ops.maximum(ops.sum(ops.cast(mask, "int32"), axis=1) - 1, 0)
        return ops.take_along_axis(inputs, last[:, None, None], axis=1)[:, 0, :]


@keras.saving.register_keras_serializable(package=PACKAGE)
class FirstTokenPooling(_MaskedPooling):
    """The vector at position 0 (the ``[CLS]`` token): the classifier then sees only what attention
    gathered there, so the [CLS] row of each head shows which words the decision rests on."""

    def call(self, inputs, mask=None):
        return inputs[:, 0, :]
