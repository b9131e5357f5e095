"""The encoder backbone: token ids -> one contextual vector per token. Every task model takes one.

``heads=8`` reaches it as ``model.backbone.num_heads`` (``configs/model/backbone/encoder.yaml``), which
``hydra.utils.instantiate`` hands to ``EncoderBackbone(num_heads=...)``, which gives it to each
``EncoderBlock`` (``layers.py``), which builds ``keras.layers.MultiHeadAttention(num_heads=...)``."""

from __future__ import annotations

import keras
from keras import layers

from mha_project import PACKAGE
from mha_project.model.layers import EncoderBlock, LocalConvolution, TokenAndPositionEmbedding


@keras.saving.register_keras_serializable(package=PACKAGE)
class EncoderBackbone(keras.Model):
    """Embeddings, ``num_layers`` x :class:`EncoderBlock`, and a final LayerNorm when pre-norm: a functional
    model built inline from one set of arguments (keras-hub's ``Backbone``). The classifier, the masked LM
    and ELECTRA's discriminator put their heads on it; the padding mask travels with its output.

    Every block returns its attention scores in this graph, so the attention a tool shows is a node of the
    model's own forward pass (:meth:`attention_model`), never a second walk of its layers.

    Output: ``(batch, T, embed_dim)``, one position longer (``[CLS]`` first) with ``cls_token=True``.

    Example:
    >>> backbone = EncoderBackbone(vocab_size=50, max_len=8, embed_dim=8, num_layers=1, num_heads=2,
    ...                            key_dim=4, ff_dim=16)
    >>> tuple(backbone(keras.ops.ones((2, 8), "int32")).shape)
    (2, 8, 8)
    >>> {layer: tuple(s.shape) for layer, s in backbone.attention_model()(keras.ops.ones((2, 8), "int32")).items()}
    {'layer_0': (2, 2, 8, 8)}
    """

    block_class = EncoderBlock  # a subclass may build other blocks (the rotary extra's)
    learned_positions = True  # False: the blocks' attention encodes positions itself

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
        causal: bool = False,
        embedding_norm: str = "layer_norm",
        cls_token: bool = False,
        local_conv: int = 0,
        dtype=None,
        **kwargs,
    ):
        # Built in call order (their random seeds follow it), each in the backbone's dtype policy (reloads as one).
        self.embedding = embedding = TokenAndPositionEmbedding(
            vocab_size,
            max_len,
            embed_dim,
            cls_token=cls_token,
            embedding_norm=embedding_norm,
            learned_positions=self.learned_positions,
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
            causal=causal,
        )
        self.blocks = [self.block_class(**block, dtype=dtype, name=f"encoder_{i}") for i in range(num_layers)]
        norm = layers.LayerNormalization(epsilon=1e-6, dtype=dtype, name="final_norm") if norm_first else None

        token_ids = keras.Input(shape=(None,), dtype="int32", name="token_ids")
        x = embedding_dropout(embedding(token_ids))
        if conv is not None:
            x = conv(x)
        for encoder_block in self.blocks:
            x, _scores = encoder_block(x, return_attention_scores=True)
        if norm is not None:
            x = norm(x)
        super().__init__(inputs=token_ids, outputs=x, **kwargs)
        if dtype is not None:
            self.dtype_policy = keras.dtype_policies.get(dtype)  # a functional model drops it (keras-hub does this)
        self.arguments = dict(
            vocab_size=vocab_size,
            max_len=max_len,
            embed_dim=embed_dim,
            num_layers=num_layers,
            **block,
            embedding_norm=embedding_norm,
            cls_token=cls_token,
            local_conv=local_conv,
        )

    def attention_model(self) -> keras.Model:
        """Token ids -> ``{"layer_0": scores, ...}``, every block's attention scores ``(batch, heads, T, T)``: the
        scores nodes of this model's own graph (Keras's feature-extraction idiom), so what a tool shows is what
        the forward pass computed, every layer before the blocks included."""
        return keras.Model(self.input, {f"layer_{i}": block.output[1] for i, block in enumerate(self.blocks)})

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
    return model if isinstance(model, EncoderBackbone) else getattr(model, "backbone", None)


def encoder_blocks(model) -> list[EncoderBlock]:
    """The encoder's blocks in order; none for a model without a backbone."""
    backbone = backbone_of(model)
    return [] if backbone is None else list(backbone.blocks)
