"""The classifier: an :class:`EncoderBackbone` -> masked pooling -> dropout -> softmax."""

from __future__ import annotations

import keras
from keras import layers

from mha_project import PACKAGE
from mha_project.config import POOLINGS
from mha_project.model.backbone import EncoderBackbone, encoder_blocks
from mha_project.model.poolings import FirstTokenPooling, LastTokenPooling, MaskedMaxPooling, MaskedMeanPooling


@keras.saving.register_keras_serializable(package=PACKAGE)
class TextClassifier(keras.Model):
    """Class probabilities from a backbone's token vectors (keras-hub's task pattern: ``backbone=``).

    ``pooling``: ``mean`` over real tokens (padding excluded), ``cls`` (the backbone's ``[CLS]`` vector;
    build the backbone with ``cls_token=True``), ``mean_max`` (mean and max concatenated), or ``last`` (the last
    real token's vector: what a causal backbone has read the whole text at).

    Example:
    >>> backbone = EncoderBackbone(vocab_size=50, max_len=8, embed_dim=8, num_layers=1, num_heads=2,
    ...                            key_dim=4, ff_dim=16)
    >>> classifier = TextClassifier(backbone, num_classes=3)
    >>> tuple(classifier(keras.ops.ones((2, 8), "int32")).shape)
    (2, 3)
    """

    def __init__(self, backbone: EncoderBackbone, num_classes: int, pooling: str = "mean", dropout=0.1, **kwargs):
        if pooling not in POOLINGS:
            raise ValueError(f"pooling={pooling!r} is invalid: must be one of {', '.join(POOLINGS)}")
        token_ids = keras.Input(shape=(None,), dtype="int32", name="token_ids")
        probs = encoder_head(backbone, token_ids, num_classes, pooling, dropout, activation="softmax")
        kwargs.pop("dtype", None)  # the backbone's: a functional model drops it, and compile reads it (loss scaling)
        super().__init__(inputs=token_ids, outputs=probs, **kwargs)
        self.dtype_policy = backbone.dtype_policy
        self.backbone = backbone
        self.num_classes = num_classes
        self.pooling = pooling
        self.dropout = dropout

    def get_config(self):
        return {
            "name": self.name,
            "trainable": self.trainable,
            "backbone": keras.layers.serialize(self.backbone),
            "num_classes": self.num_classes,
            "pooling": self.pooling,
            "dropout": self.dropout,
        }

    @classmethod
    def from_config(cls, config):
        return cls(**{**config, "backbone": keras.layers.deserialize(config["backbone"])})


def encoder_head(backbone, token_ids, num_classes: int, pooling: str, dropout: float, activation):
    """Pooling, dropout and the class layer on the backbone's token vectors: probabilities or logits."""
    dtype = backbone.dtype_policy.name  # a name: the poolings' automatic get_config serialises it
    x = backbone(token_ids)
    if pooling == "cls":
        pooled = FirstTokenPooling(dtype=dtype, name="cls_pool")(x)
    elif pooling == "last":
        pooled = LastTokenPooling(dtype=dtype, name="last_pool")(x)
    else:
        pooled = MaskedMeanPooling(dtype=dtype, name="masked_mean_pool")(x)
    if pooling == "mean_max":
        # Max over real tokens as well: a strong single word ("awful") is not averaged away.
        maximum = MaskedMaxPooling(dtype=dtype, name="masked_max_pool")(x)
        pooled = layers.Concatenate(dtype=dtype, name="mean_max_pool")([pooled, maximum])
    x = layers.Dropout(dropout, dtype=dtype, name="head_dropout")(pooled)
    # float32 output keeps the softmax stable under mixed precision.
    return layers.Dense(num_classes, activation=activation, dtype="float32", name="classifier")(x)


def uncompiled_copy(model, weights=None):
    """A new, uncompiled model from ``model``'s config, holding ``weights`` (default: ``model``'s own)."""
    copy = type(model).from_config(model.get_config())
    if not copy.built:
        copy.build()
    copy.set_weights(model.get_weights() if weights is None else weights)
    return copy


def model_summary(model: keras.Model) -> str:
    """Keras's layer table, the backbone's layers nested inside it, preceded by what the table does not show:
    each block's attention shape. Taken before ``compile``, so its parameter counts are the model's alone."""
    blocks = encoder_blocks(model)
    head = f"{len(blocks)} encoder block(s), each {blocks[0].summary_line()}\n" if blocks else ""
    lines = []
    model.summary(line_length=80, expand_nested=True, print_fn=lambda text, line_break=True: lines.append(text))
    return head + "\n".join(lines).rstrip() + "\n"
