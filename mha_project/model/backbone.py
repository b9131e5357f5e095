"""The encoder backbone: token ids -> one contextual vector per token. Every task model takes one.

``model.num_heads`` (the ``heads`` shortcut, ``mha_project/config.py``) goes straight into
``EncoderBlock(num_heads=...)``, which builds ``keras.layers.MultiHeadAttention(num_heads=...)``."""

from __future__ import annotations

import keras
from keras import layers

from mha_project.model import LEARNED_POSITIONS, PACKAGE
from mha_project.model.layers import EncoderBlock, LocalConvolution, TokenAndPositionEmbedding


@keras.saving.register_keras_serializable(package=PACKAGE)
class EncoderBackbone(keras.Model):
    """Embeddings, ``num_layers`` x :class:`EncoderBlock`, and a final LayerNorm when pre-norm: a functional
    model built inline from one set of arguments (keras-hub's ``Backbone``). The classifier, the masked LM
    and ELECTRA's discriminator put their heads on it; the padding mask travels with its output.

    Each argument is the ``model`` config key of the same name (``from_model_config``), except
    ``vocab_size`` (from the vocabulary) and ``cls_token`` (``model.pooling=cls``).

    Output: ``(batch, T, embed_dim)``, one position longer (``[CLS]`` first) with ``cls_token=True``.

    Example:
    >>> backbone = EncoderBackbone(vocab_size=50, max_len=8, embed_dim=8, num_layers=1, num_heads=2,
    ...                            key_dim=4, ff_dim=16)
    >>> tuple(backbone(keras.ops.ones((2, 8), "int32")).shape)
    (2, 8, 8)
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
        attention_dropout: float | None = None,
        activation: str = "gelu",
        use_bias: bool = True,
        use_gate: bool = False,
        sliding_window: int | None = None,
        norm_first: bool = False,
        embedding_norm: str = "layer_norm",
        position_encoding: str = LEARNED_POSITIONS,
        cls_token: bool = False,
        local_conv: int = 0,
        dtype=None,
        **kwargs,
    ):
        # Built in call order (their random seeds follow it), each in the backbone's dtype policy (reloads as one).
        self.embedding = TokenAndPositionEmbedding(
            vocab_size,
            max_len,
            embed_dim,
            cls_token=cls_token,
            embedding_norm=embedding_norm,
            learned_positions=position_encoding == LEARNED_POSITIONS,  # else attention encodes them
            dtype=dtype,
            name="embedding",
        )
        embedding_dropout = layers.Dropout(dropout, dtype=dtype, name="embedding_dropout")
        conv = LocalConvolution(local_conv, dropout=dropout, dtype=dtype, name="local_conv") if local_conv else None
        # What every encoder block takes, named once: the blocks get it, and so does get_config.
        block = dict(
            num_heads=num_heads,
            key_dim=key_dim,
            ff_dim=ff_dim,
            value_dim=value_dim,
            dropout=dropout,
            attention_dropout=attention_dropout,
            activation=activation,
            use_bias=use_bias,
            use_gate=use_gate,
            sliding_window=sliding_window,
            norm_first=norm_first,
        )
        self.blocks = [
            EncoderBlock(**block, position_encoding=position_encoding, dtype=dtype, name=f"encoder_{i}")
            for i in range(num_layers)
        ]
        norm = layers.LayerNormalization(epsilon=1e-6, dtype=dtype, name="final_norm") if norm_first else None
        token_ids = keras.Input(shape=(None,), dtype="int32", name="token_ids")
        x = token_ids
        for layer in (self.embedding, embedding_dropout, conv, *self.blocks, norm):
            x = x if layer is None else layer(x)
        super().__init__(inputs=token_ids, outputs=x, **kwargs)
        if dtype is not None:
            self.dtype_policy = keras.dtype_policies.get(dtype)  # a functional model drops it (keras-hub does this)
        # The constructor's own arguments, as given (get_config adds Keras's name, trainable and dtype).
        self.arguments = dict(
            vocab_size=vocab_size,
            max_len=max_len,
            embed_dim=embed_dim,
            num_layers=num_layers,
            **block,
            embedding_norm=embedding_norm,
            position_encoding=position_encoding,
            cls_token=cls_token,
            local_conv=local_conv,
        )

    @classmethod
    def from_model_config(cls, model_cfg, vocab_size: int, **changes) -> EncoderBackbone:
        """The backbone the ``model`` config group describes; ``changes`` override single arguments."""
        arguments = dict(
            vocab_size=vocab_size,
            max_len=model_cfg.max_len,
            embed_dim=model_cfg.embed_dim,
            num_layers=model_cfg.num_layers,
            num_heads=model_cfg.num_heads,
            key_dim=model_cfg.key_dim,
            ff_dim=model_cfg.ff_dim,
            value_dim=model_cfg.value_dim,
            dropout=model_cfg.dropout,
            attention_dropout=model_cfg.attention_dropout,
            activation=model_cfg.activation,
            use_bias=model_cfg.use_bias,
            use_gate=model_cfg.use_gate,
            sliding_window=model_cfg.sliding_window,
            norm_first=model_cfg.norm_first,
            embedding_norm=model_cfg.embedding_norm,
            position_encoding=model_cfg.position_encoding,
            cls_token=model_cfg.pooling == "cls",
            local_conv=model_cfg.local_conv,
        )
        return cls(**{**arguments, **changes}, name="backbone")

    def clone(self, **changes) -> EncoderBackbone:
        """A backbone of the same shape holding these weights, with ``changes`` (e.g. another dropout rate)."""
        twin = type(self).from_config({**self.get_config(), **changes})
        twin.set_weights(self.get_weights())
        return twin

    @property
    def token_embedding(self):
        """The token embedding layer (its ``embeddings`` are the tied masked-LM output projection)."""
        return self.embedding.token_embedding

    def get_config(self):
        return {
            "name": self.name,
            "trainable": self.trainable,
            "dtype": keras.dtype_policies.serialize(self.dtype_policy),
            **self.arguments,
        }

    @classmethod
    def from_config(cls, config):
        return cls(**config)


def backbone_of(model) -> EncoderBackbone | None:
    """A task model's backbone (None for a bag of n-grams alone); a backbone is its own."""
    return model if isinstance(model, EncoderBackbone) else model.backbone


def encoder_blocks(model) -> list[EncoderBlock]:
    """The encoder's blocks in order; none for a classifier without a backbone (``model.ngram_branch=bigram_alone``)."""
    backbone = backbone_of(model)
    return [] if backbone is None else [layer for layer in backbone.layers if isinstance(layer, EncoderBlock)]
