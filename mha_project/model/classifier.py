"""The classifier: an :class:`EncoderBackbone` -> masked pooling -> dropout -> softmax."""

from __future__ import annotations

import keras
from keras import layers

from mha_project.model.backbone import EncoderBackbone, backbone_of, encoder_blocks
from mha_project.model.heads import FirstTokenPooling, MaskedMaxPooling, MaskedMeanPooling
from mha_project.model.layers import PACKAGE

POOLINGS = ("mean", "cls", "mean_max")  # model.pooling


@keras.saving.register_keras_serializable(package=PACKAGE)
class TextClassifier(keras.Model):
    """Class probabilities from a backbone's token vectors (keras-hub's task pattern: ``backbone=``).

    ``pooling``: ``mean`` over real tokens (padding excluded), ``cls`` (the backbone's ``[CLS]`` vector;
    build the backbone with ``cls_token=True``), or ``mean_max`` (mean and max concatenated).

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
        dtype = backbone.dtype_policy.name  # a name: the poolings' automatic get_config serialises it
        token_ids = keras.Input(shape=(None,), dtype="int32", name="token_ids")
        x = backbone(token_ids)
        if pooling == "cls":
            pooled = FirstTokenPooling(dtype=dtype, name="cls_pool")(x)
        else:
            pooled = MaskedMeanPooling(dtype=dtype, name="masked_mean_pool")(x)
        if pooling == "mean_max":
            # Max over real tokens as well: a strong single word ("awful") is not averaged away.
            maximum = MaskedMaxPooling(dtype=dtype, name="masked_max_pool")(x)
            pooled = layers.Concatenate(dtype=dtype, name="mean_max_pool")([pooled, maximum])
        x = layers.Dropout(dropout, dtype=dtype, name="head_dropout")(pooled)
        # float32 output keeps the softmax stable under mixed precision.
        probs = layers.Dense(num_classes, activation="softmax", dtype="float32", name="classifier")(x)
        super().__init__(inputs=token_ids, outputs=probs, **kwargs)
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
        config = dict(config)
        config["backbone"] = keras.layers.deserialize(config["backbone"])
        return cls(**config)


def build_classifier(model_cfg, vocab_size: int, num_classes: int, backbone=None) -> TextClassifier:
    """The classifier the ``model`` config group describes, on ``backbone`` when given (a pretrained one)."""
    if backbone is None:
        backbone = EncoderBackbone.from_model_config(model_cfg, vocab_size)
    pooling = model_cfg.get("pooling", "mean")
    return TextClassifier(backbone, num_classes, pooling=pooling, dropout=model_cfg.dropout, name="mha_classifier")


def model_summary(model: keras.Model) -> str:
    """Keras's layer tables (the classifier's, then its backbone's), preceded by what the tables do not
    show: each block's attention shape."""
    blocks = encoder_blocks(model)
    head = ""
    if blocks:
        block = blocks[0]
        value_dim = block.value_dim or block.key_dim
        head = (
            f"{len(blocks)} encoder block(s), each {type(block.attention).__name__}(num_heads={block.num_heads}, "
            f"key_dim={block.key_dim}, value_dim={value_dim}) on embed_dim {block.ff_outer.units}, "
            f"feed-forward {block.ff_dim}\n"
        )
    lines = []
    for part in (model, backbone_of(model)) if backbone_of(model) is not model else (model,):
        part.summary(line_length=80, print_fn=lambda text, line_break=True: lines.append(text))
    return head + "\n".join(lines).rstrip() + "\n"
