"""The wide-and-deep classifier: the core's encoder head and a bag of n-grams (``layers.py``), their logits
added before the softmax (or a sigmoid per class, one-vs-rest); how ``model.ngram_*`` builds it, readies it
and gives its bag a learning rate."""

from __future__ import annotations

import keras
import numpy as np  # noqa: F401  (the examples)
import tensorflow as tf
from keras import layers, ops

from mha_project.extras.ngrams.layers import BagOfNgrams, LinearNgramLayer, NaiveBayesNgrams, NgramLayer, TfidfNgrams
from mha_project.extras.ngrams.options import NGRAM_OBJECTIVES
from mha_project.model import PACKAGE, POOLINGS
from mha_project.model.backbone import EncoderBackbone
from mha_project.model.classifier import encoder_head


@keras.saving.register_keras_serializable(package=PACKAGE)
class OneVsRestCrossentropy(keras.losses.Loss):
    """Per text, the binary cross-entropy of each class's sigmoid output against "this class or not", summed
    over the classes: the loss of K one-vs-rest logistic regressions trained side by side.

    >>> round(float(OneVsRestCrossentropy()(np.array([1]), np.array([[0.5, 0.5, 0.5]]))), 4)  # 3 x log 2
    2.0794
    """

    def __init__(self, name="one_vs_rest_crossentropy", reduction="sum_over_batch_size", dtype=None):
        super().__init__(name=name, reduction=reduction, dtype=dtype)

    def call(self, y_true, y_pred):
        classes = ops.shape(y_pred)[-1]
        is_class = ops.one_hot(ops.cast(ops.reshape(y_true, (-1,)), "int32"), classes, dtype=y_pred.dtype)
        return ops.sum(ops.binary_crossentropy(is_class, y_pred), axis=-1)


@keras.saving.register_keras_serializable(package=PACKAGE)
class WideAndDeepClassifier(keras.Model):
    """The core classifier's head (backbone -> pooling -> dropout -> class layer) beside ``ngram_branch``, a
    bag of the whole text's n-grams whose class logits are added to the encoder's before the softmax, so both
    train jointly in one ``fit`` (wide and deep); ``encoder_logit_dropout`` drops the encoder's logits for
    that fraction of the training examples. ``objective="one_vs_rest"``: a sigmoid per class instead of the
    softmax, trained with :class:`OneVsRestCrossentropy` (each class's score is its own probability; the
    scores need not sum to 1). With ``backbone=None`` the bag alone classifies (an ablation: no
    attention at all; ``token_ids`` is still an input, unread, so that every run's data feeds every model).

    Its input is ``{"token_ids", "ngrams"}``: the encoder's ids, truncated, and the bag's features of the raw
    text, which :meth:`text_inputs` makes (the pipeline, the SavedModel and the analysis
    tools call it).

    Example:
    >>> backbone = EncoderBackbone(vocab_size=50, max_len=8, embed_dim=8, num_layers=1, num_heads=2,
    ...                            key_dim=4, ff_dim=16)
    >>> model = WideAndDeepClassifier(backbone, 3, ngram_branch=BagOfNgrams(3, features=32, dim=4))
    >>> inputs = {"token_ids": np.ones((2, 8), "int32"), **model.text_inputs(["great tea", "stale"])}
    >>> tuple(model(inputs).shape)
    (2, 3)
    """

    def __init__(
        self,
        backbone: EncoderBackbone | None,
        num_classes: int,
        pooling: str = "mean",
        dropout=0.1,
        *,
        ngram_branch: NgramLayer,
        encoder_logit_dropout: float = 0.0,
        objective: str = "softmax",
        **kwargs,
    ):
        if pooling not in POOLINGS:
            raise ValueError(f"pooling={pooling!r} is invalid: must be one of {', '.join(POOLINGS)}")
        if objective not in NGRAM_OBJECTIVES:
            raise ValueError(f"objective={objective!r} is invalid: must be one of {', '.join(NGRAM_OBJECTIVES)}")
        token_ids = keras.Input(shape=(None,), dtype="int32", name="token_ids")
        ngrams = keras.Input(shape=(None, 2), dtype="int32", name="ngrams")
        encoder = None
        if backbone is not None:
            encoder = encoder_head(backbone, token_ids, num_classes, pooling, dropout, activation=None)
        if encoder is not None and encoder_logit_dropout:
            # Whole-example dropout of the encoder's logits (one mask value per example, broadcast over the
            # classes): on those examples the bag must classify alone, so it does not leave the training
            # examples to an encoder that memorises them faster than it generalises.
            encoder = layers.Dropout(
                encoder_logit_dropout, noise_shape=(None, 1), dtype="float32", name="encoder_logit_dropout"
            )(encoder)
        bag = ngram_branch(ngrams)
        total = bag if encoder is None else layers.Add(dtype="float32", name="wide_and_deep")([encoder, bag])
        activation = "softmax" if objective == "softmax" else "sigmoid"
        probs = layers.Activation(activation, dtype="float32", name="probabilities")(total)
        kwargs.pop("dtype", None)  # its parts': a functional model drops it, and compile reads it (loss scaling)
        inputs = {"token_ids": token_ids, "ngrams": ngrams}
        super().__init__(inputs=inputs, outputs=probs, **kwargs)
        self.dtype_policy = (backbone if backbone is not None else ngram_branch).dtype_policy
        self.backbone = backbone
        self.ngram_branch = ngram_branch
        self.num_classes = num_classes
        self.pooling = pooling
        self.dropout = dropout
        self.encoder_logit_dropout = encoder_logit_dropout
        self.objective = objective

    def text_inputs(self, texts) -> dict:
        """The bag's inputs for ``texts`` (a string tensor, or a list of strings: then numpy arrays)."""
        if tf.is_tensor(texts):
            return self.ngram_branch.inputs_for(texts)
        return {k: v.numpy() for k, v in self.ngram_branch.inputs_for(tf.constant(list(texts), tf.string)).items()}

    def get_config(self):
        return {
            "name": self.name,
            "trainable": self.trainable,
            "backbone": None if self.backbone is None else keras.layers.serialize(self.backbone),
            "num_classes": self.num_classes,
            "pooling": self.pooling,
            "dropout": self.dropout,
            "ngram_branch": keras.layers.serialize(self.ngram_branch),
            "encoder_logit_dropout": self.encoder_logit_dropout,
            "objective": self.objective,
        }

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        for part in ("backbone", "ngram_branch"):
            if config.get(part) is not None:
                config[part] = keras.layers.deserialize(config[part])
        return cls(**config)


def build_wide_and_deep(model_cfg, vocab_size: int, num_classes: int, backbone=None, dtype=None):
    """The classifier with ``model.ngram_branch`` beside the encoder (``bigram``) or alone (``bigram_alone``);
    None for ``model.ngram_branch=none`` (the core's classifier)."""
    branch = model_cfg.get("ngram_branch", "none")
    if branch == "none":
        return None
    # The weighting picks the bag and its one setting of its own; the rest they share.
    bag, own = {
        "none": (BagOfNgrams, {"dim": model_cfg.ngram_dim}),
        "nb": (NaiveBayesNgrams, {"c": model_cfg.ngram_c}),
        "tfidf": (TfidfNgrams, {"c": model_cfg.ngram_c}),
    }[model_cfg.ngram_weighting]
    ngrams = bag(num_classes, model_cfg.ngram_features, model_cfg.ngram_max_n, dtype=dtype, name="ngram_branch", **own)
    if branch == "bigram_alone":
        backbone = None
    elif backbone is None:
        backbone = EncoderBackbone.from_model_config(model_cfg, vocab_size, dtype=dtype)
    return WideAndDeepClassifier(
        backbone,
        num_classes,
        pooling=model_cfg.pooling,
        dropout=model_cfg.dropout,
        ngram_branch=ngrams,
        encoder_logit_dropout=model_cfg.encoder_logit_dropout,
        objective=model_cfg.ngram_objective,
        dtype=dtype,
        name="mha_classifier",
    )


def adapt_bag(cfg, model, inputs) -> None:
    """A linear bag's feature weights (naive-Bayes ratios, idf), from the training split (all of it, on every
    process)."""
    # Imported here: this module registers Keras classes when Keras loads, which may be while data.pipeline loads.
    from mha_project.data.pipeline import pipeline_from_cfg

    if isinstance(getattr(model, "ngram_branch", None), LinearNgramLayer):
        data = inputs.data
        train = pipeline_from_cfg(cfg, data.train_texts, data.train_labels, inputs.preprocessor, shuffle=False)
        model.ngram_branch.adapt(train.as_numpy_iterator())


def bag_optimizer(model, trainer_cfg, adamw):
    """With ``trainer.ngram_lr``, the bag gets its own AdamW peaking there (``keras.optimizers.MultiOptimizer``):
    a bag of n-grams learns at several times the rate that suits the encoder, and one shared rate leaves one of
    the two off its best."""
    ngram_lr = trainer_cfg.get("ngram_lr")
    if ngram_lr is None or getattr(model, "ngram_branch", None) is None:
        return None
    branch = f"{model.ngram_branch.name}/.*"  # its variables' paths: ngram_branch/ngram_embedding/embeddings, ...
    return keras.optimizers.MultiOptimizer(
        keras.optimizers.OptimizerMap(adamw(trainer_cfg.lr), {branch: adamw(ngram_lr)})
    )
