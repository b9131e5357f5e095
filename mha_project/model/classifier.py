"""The classifier: an :class:`EncoderBackbone` -> masked pooling -> dropout -> softmax, optionally beside a
bag of n-grams (:class:`~mha_project.model.ngrams.BagOfNgrams`) whose logits are added before the softmax."""

from __future__ import annotations

import keras
from keras import layers

from mha_project.model import NGRAM_BRANCHES, PACKAGE, POOLINGS
from mha_project.model.backbone import EncoderBackbone, encoder_blocks
from mha_project.model.ngrams import BagOfNgrams, NaiveBayesNgrams
from mha_project.model.poolings import FirstTokenPooling, MaskedMaxPooling, MaskedMeanPooling


@keras.saving.register_keras_serializable(package=PACKAGE)
class TextClassifier(keras.Model):
    """Class probabilities from a backbone's token vectors (keras-hub's task pattern: ``backbone=``).

    ``pooling``: ``mean`` over real tokens (padding excluded), ``cls`` (the backbone's ``[CLS]`` vector;
    build the backbone with ``cls_token=True``), or ``mean_max`` (mean and max concatenated).

    ``ngram_branch`` (wide and deep): a :class:`BagOfNgrams` on the same token ids, whose class logits are
    added to the encoder's before the softmax, so both train jointly in one ``fit``; ``encoder_logit_dropout``
    drops the encoder's logits for that fraction of the training examples. With ``backbone=None``
    the bag alone classifies (an ablation: no attention at all).

    Example:
    >>> backbone = EncoderBackbone(vocab_size=50, max_len=8, embed_dim=8, num_layers=1, num_heads=2,
    ...                            key_dim=4, ff_dim=16)
    >>> classifier = TextClassifier(backbone, num_classes=3)
    >>> tuple(classifier(keras.ops.ones((2, 8), "int32")).shape)
    (2, 3)
    """

    def __init__(
        self,
        backbone: EncoderBackbone | None,
        num_classes: int,
        pooling: str = "mean",
        dropout=0.1,
        ngram_branch: BagOfNgrams | NaiveBayesNgrams | None = None,
        encoder_logit_dropout: float = 0.0,
        **kwargs,
    ):
        if pooling not in POOLINGS:
            raise ValueError(f"pooling={pooling!r} is invalid: must be one of {', '.join(POOLINGS)}")
        if backbone is None and ngram_branch is None:
            raise ValueError("backbone=None needs an ngram_branch: a classifier needs one of the two")
        token_ids = keras.Input(shape=(None,), dtype="int32", name="token_ids")
        # Alone, the encoder's head ends in the softmax; beside a bag, logits are added, then the softmax.
        activation = "softmax" if ngram_branch is None else None
        encoder = None
        if backbone is not None:
            encoder = _encoder_head(backbone, token_ids, num_classes, pooling, dropout, activation)
        if ngram_branch is None:
            probs = encoder
        else:
            if encoder is not None and encoder_logit_dropout:
                # Whole-example dropout of the encoder's logits (one mask value per example, broadcast over
                # the classes): on those examples the bag must classify alone, so it does not leave the
                # training examples to an encoder that memorises them faster than it generalises.
                encoder = layers.Dropout(
                    encoder_logit_dropout, noise_shape=(None, 1), dtype="float32", name="encoder_logit_dropout"
                )(encoder)
            bag = ngram_branch(token_ids)
            total = bag if encoder is None else layers.Add(dtype="float32", name="wide_and_deep")([encoder, bag])
            probs = layers.Activation("softmax", dtype="float32", name="probabilities")(total)
        super().__init__(inputs=token_ids, outputs=probs, **kwargs)
        self.backbone = backbone
        self.ngram_branch = ngram_branch
        self.num_classes = num_classes
        self.pooling = pooling
        self.dropout = dropout
        self.encoder_logit_dropout = encoder_logit_dropout

    def get_config(self):
        config = {
            "name": self.name,
            "trainable": self.trainable,
            "backbone": None if self.backbone is None else keras.layers.serialize(self.backbone),
            "num_classes": self.num_classes,
            "pooling": self.pooling,
            "dropout": self.dropout,
            "ngram_branch": None if self.ngram_branch is None else keras.layers.serialize(self.ngram_branch),
            "encoder_logit_dropout": self.encoder_logit_dropout,
        }
        return config

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        for part in ("backbone", "ngram_branch"):
            if config.get(part) is not None:
                config[part] = keras.layers.deserialize(config[part])
        return cls(**config)


def _encoder_head(backbone, token_ids, num_classes: int, pooling: str, dropout: float, activation):
    """Pooling, dropout and the class layer on the backbone's token vectors: probabilities or logits."""
    dtype = backbone.dtype_policy.name  # a name: the poolings' automatic get_config serialises it
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
    return layers.Dense(num_classes, activation=activation, dtype="float32", name="classifier")(x)


def uncompiled_copy(model, weights=None):
    """A new, uncompiled model from ``model``'s config, holding ``weights`` (default: ``model``'s own)."""
    copy = type(model).from_config(model.get_config())
    if not copy.built:
        copy.build()
    copy.set_weights(model.get_weights() if weights is None else weights)
    return copy


def build_classifier(model_cfg, vocab_size: int, num_classes: int, backbone=None) -> TextClassifier:
    """The classifier the ``model`` config group describes, on ``backbone`` when given (a pretrained one)."""
    branch = model_cfg.ngram_branch
    if branch not in NGRAM_BRANCHES:
        raise ValueError(f"model.ngram_branch={branch} is invalid: must be one of {', '.join(NGRAM_BRANCHES)}")
    ngrams = None
    if branch != "none" and model_cfg.ngram_weighting == "nb":
        ngrams = NaiveBayesNgrams(
            vocab_size, num_classes, buckets=model_cfg.ngram_buckets, l2=model_cfg.ngram_l2, name="ngram_branch"
        )
    elif branch != "none":
        ngrams = BagOfNgrams(
            vocab_size, num_classes, buckets=model_cfg.ngram_buckets, dim=model_cfg.ngram_dim, name="ngram_branch"
        )
    if branch == "bigram_alone":
        backbone = None
    elif backbone is None:
        backbone = EncoderBackbone.from_model_config(model_cfg, vocab_size)
    return TextClassifier(
        backbone,
        num_classes,
        pooling=model_cfg.pooling,
        dropout=model_cfg.dropout,
        ngram_branch=ngrams,
        encoder_logit_dropout=model_cfg.encoder_logit_dropout if ngrams is not None else 0.0,
        name="mha_classifier",
    )


def model_summary(model: keras.Model) -> str:
    """Keras's layer table, the backbone's layers nested inside it, preceded by what the table does not show:
    each block's attention shape. Taken before ``compile``, so its parameter counts are the model's alone."""
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
    model.summary(line_length=80, expand_nested=True, print_fn=lambda text, line_break=True: lines.append(text))
    return head + "\n".join(lines).rstrip() + "\n"
