"""The encoder backbone: token ids -> one contextual vector per token. Every task model takes one.

``model.num_heads`` (the ``heads`` shortcut, ``mha_project/config.py``) goes straight into
``EncoderBlock(num_heads=...)``, which builds ``keras.layers.MultiHeadAttention(num_heads=...)``."""

from __future__ import annotations

import keras
from keras import layers

from mha_project.model.layers import PACKAGE, EncoderBlock, LocalConvolution, TokenAndPositionEmbedding


@keras.saving.register_keras_serializable(package=PACKAGE)
class EncoderBackbone(keras.Model):
    """Embeddings, ``num_layers`` x :class:`EncoderBlock`, and a final LayerNorm when pre-norm: a functional
    model built from one set of arguments (keras-hub's ``Backbone``). The classifier, the masked LM and
    ELECTRA's discriminator put their heads on it; the padding mask travels with its output.

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
        norm_first: bool = False,
        embedding_norm: str = "layer_norm",
        position_encoding: str = "learned",
        cls_token: bool = False,
        local_conv: int = 0,
        dtype=None,
        **kwargs,
    ):
        arguments = dict(
            vocab_size=vocab_size,
            max_len=max_len,
            embed_dim=embed_dim,
            num_layers=num_layers,
            num_heads=num_heads,
            key_dim=key_dim,
            ff_dim=ff_dim,
            value_dim=value_dim,
            dropout=dropout,
            attention_dropout=attention_dropout,
            activation=activation,
            use_bias=use_bias,
            norm_first=norm_first,
            embedding_norm=embedding_norm,
            position_encoding=position_encoding,
            cls_token=cls_token,
        )
        if local_conv:  # absent otherwise: backbones saved before the option read the same
            arguments["local_conv"] = local_conv

        embedding, embedding_dropout, convolution, blocks, final_norm = _encoder_layers(dtype=dtype, **arguments)

        token_ids = keras.Input(shape=(None,), dtype="int32", name="token_ids")
        x = embedding_dropout(embedding(token_ids))
        if convolution is not None:
            x = convolution(x)
        for block in blocks:
            x = block(x)
        if final_norm is not None:
            x = final_norm(x)
        super().__init__(inputs=token_ids, outputs=x, **kwargs)
        if dtype is not None:
            self.dtype_policy = keras.dtype_policies.get(dtype)  # a functional model drops it (keras-hub does this)

        self.embedding = embedding
        self.embedding_dropout = embedding_dropout
        self.blocks = blocks
        self.final_norm = final_norm
        self.arguments = arguments

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
            value_dim=model_cfg.value_dim,
            ff_dim=model_cfg.ff_dim,
            dropout=model_cfg.dropout,
            attention_dropout=model_cfg.get("attention_dropout"),
            activation=model_cfg.activation,
            use_bias=model_cfg.use_bias,
            norm_first=model_cfg.norm_first,
            embedding_norm=model_cfg.get("embedding_norm", "none"),
            position_encoding=model_cfg.get("position_encoding", "learned"),
            cls_token=model_cfg.get("pooling", "mean") == "cls",
            local_conv=model_cfg.get("local_conv", 0),
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


def _encoder_layers(
    vocab_size,
    max_len,
    embed_dim,
    num_layers,
    num_heads,
    key_dim,
    ff_dim,
    value_dim,
    dropout,
    attention_dropout,
    activation,
    use_bias,
    norm_first,
    embedding_norm,
    position_encoding,
    cls_token,
    dtype,
    local_conv=0,
):
    """The backbone's layers, each with the backbone's dtype policy (a mixed-precision model reloads as one)."""
    rotary = position_encoding == "rotary"
    embedding = TokenAndPositionEmbedding(
        vocab_size,
        max_len,
        embed_dim,
        cls_token=cls_token,
        input_scale=embedding_norm,
        learned_positions=not rotary,
        dtype=dtype,
        name="embedding",
    )
    embedding_dropout = layers.Dropout(dropout, dtype=dtype, name="embedding_dropout")
    convolution = None
    if local_conv:
        convolution = LocalConvolution(local_conv, dropout=dropout, dtype=dtype, name="local_conv")
    blocks = [
        EncoderBlock(
            num_heads=num_heads,
            key_dim=key_dim,
            value_dim=value_dim,
            ff_dim=ff_dim,
            dropout=dropout,
            attention_dropout=attention_dropout,
            activation=activation,
            use_bias=use_bias,
            norm_first=norm_first,
            rotary_positions=rotary,
            dtype=dtype,
            name=f"encoder_{i}",
        )
        for i in range(num_layers)
    ]
    final_norm = layers.LayerNormalization(epsilon=1e-6, dtype=dtype, name="final_norm") if norm_first else None

    return embedding, embedding_dropout, convolution, blocks, final_norm


def backbone_of(model) -> keras.Model:
    """A task model's backbone; a classifier saved before the backbone existed is its own (same layer names)."""
    if hasattr(model, "backbone"):
        return model.backbone
    return next((layer for layer in model.layers if isinstance(layer, EncoderBackbone)), model)


def encoder_blocks(model) -> list[EncoderBlock]:
    """The encoder's blocks in order; none for a classifier without a backbone (``model.ngram_branch=bigram_alone``)."""
    backbone = backbone_of(model)
    return [] if backbone is None else [layer for layer in backbone.layers if isinstance(layer, EncoderBlock)]
