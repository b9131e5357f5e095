"""Rotary positions (RoFormer): queries and keys rotated by position inside attention
(``model/backbone=rotary``), so attention scores depend on relative positions only. The Keras classes register
when this module is imported: a run's config names it (``_target_``), and the run's reader imports it."""

from __future__ import annotations

import keras
from keras import layers, ops

from mha_project import PACKAGE
from mha_project.model.backbone import EncoderBackbone
from mha_project.model.layers import EncoderBlock


def rotate_positions(x, max_wavelength: float = 10000.0):
    """Rotary position encoding (RoFormer, Su et al. 2021) of ``(batch, seq, heads, dim)`` queries or keys.

    Feature pairs ``(i, i + dim/2)`` at position ``p`` are rotated by the angle ``p * max_wavelength^(-2i/dim)``
    (keras-hub's ``RotaryEmbedding`` layout). A query at ``p`` and a key at ``q`` rotated this way have a
    dot product that depends on ``p - q`` only: attention sees *relative* positions, so "the previous word"
    is the same pattern at every position.

    Written here rather than imported from keras-hub because keras-hub pins ``tensorflow-text`` to the
    TensorFlow version and pulls in kagglehub, sentencepiece and tokenizers for one 10-line function.

    Example:
    >>> q = keras.random.normal((1, 6, 2, 8), seed=1)
    >>> k = keras.random.normal((1, 6, 2, 8), seed=2)
    >>> # shifting both by the same offset leaves the scores of a pair of positions unchanged
    >>> a = ops.sum(rotate_positions(q)[:, 1] * rotate_positions(k)[:, 3], axis=-1)
    >>> shifted = lambda x: ops.concatenate([ops.zeros_like(x[:, :2]), x], axis=1)
    >>> b = ops.sum(rotate_positions(shifted(q))[:, 3] * rotate_positions(shifted(k))[:, 5], axis=-1)
    >>> bool(ops.all(ops.abs(a - b) < 1e-4))
    True
    """
    dim = x.shape[-1]
    if dim % 2:
        raise ValueError(f"rotary positions need an even key_dim, got {dim}")
    half = dim // 2
    inverse_frequency = 1.0 / (max_wavelength ** (ops.arange(0, half, dtype="float32") / half))
    positions = ops.arange(ops.shape(x)[1], dtype="float32")
    angles = positions[:, None] * inverse_frequency[None, :]  # (seq, dim/2)
    cos = ops.cast(ops.cos(angles), x.dtype)[None, :, None, :]
    sin = ops.cast(ops.sin(angles), x.dtype)[None, :, None, :]
    x1, x2 = x[..., :half], x[..., half:]
    return ops.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)


@keras.saving.register_keras_serializable(package=PACKAGE)
class RotaryMultiHeadAttention(layers.MultiHeadAttention):
    """``keras.layers.MultiHeadAttention`` with rotary position encoding on the projected queries and keys.

    Everything else (projections, masking, the fused ``dot_product_attention`` path, scores) is
    Keras's own: only ``_compute_attention``, which receives the ``(batch, seq, heads, key_dim)``
    projections, rotates them first (the hook keras-hub's attention layers use for the same purpose).

    Example:
    >>> mha = RotaryMultiHeadAttention(num_heads=4, key_dim=16)
    >>> out, scores = mha(keras.random.normal((2, 10, 32)), keras.random.normal((2, 10, 32)),
    ...                   return_attention_scores=True)
    >>> tuple(out.shape), tuple(scores.shape)
    ((2, 10, 32), (2, 4, 10, 10))
    """

    # A private method, the one place between the projections and the scores: Keras 3.15's public arguments
    # (use_gate, sliding_window among them) act elsewhere, and Keras's docstring of it invites the override.
    def _compute_attention(self, query, key, value, attention_mask=None, training=None, *args, **kwargs):
        return super()._compute_attention(
            rotate_positions(query), rotate_positions(key), value, attention_mask, training, *args, **kwargs
        )


@keras.saving.register_keras_serializable(package=PACKAGE)
class RotaryEncoderBlock(EncoderBlock):
    """An :class:`EncoderBlock` whose attention is :class:`RotaryMultiHeadAttention`."""

    attention_class = RotaryMultiHeadAttention


@keras.saving.register_keras_serializable(package=PACKAGE)
class RotaryEncoderBackbone(EncoderBackbone):
    """An :class:`EncoderBackbone` with no learned position table: its blocks rotate queries and keys by position.

    Example:
    >>> backbone = RotaryEncoderBackbone(vocab_size=50, max_len=8, embed_dim=8, num_layers=1, num_heads=2,
    ...                                  key_dim=4, ff_dim=16)
    >>> backbone.embedding.position_embedding is None, type(backbone.blocks[0].attention).__name__
    (True, 'RotaryMultiHeadAttention')
    """

    block_class = RotaryEncoderBlock
    learned_positions = False
