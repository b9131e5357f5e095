"""The wide-and-deep classifier (``model=wide_deep``): the core's encoder head and a bag of n-grams
(``layers.py``), their logits added before the softmax (or a sigmoid per class, one-vs-rest, trained with
:class:`OneVsRestCrossentropy`: ``loss=one_vs_rest``); the bag's own learning rate (:func:`bag_optimizer`)."""

from __future__ import annotations

import time

import keras
import numpy as np
import tensorflow as tf
from keras import layers, ops

from mha_project import PACKAGE
from mha_project.config import POOLINGS
from mha_project.extras.ngrams.layers import LinearNgramLayer, NgramLayer
from mha_project.extras.ngrams.options import C_GRID, NGRAM_OBJECTIVES
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


def objective_for(objective: str, num_classes: int) -> str:
    """``auto``'s objective for ``num_classes``: one softmax for two classes, a sigmoid per class (the K binary
    losses NB-LR trains) for more; any other objective as it is."""
    if objective != "auto":
        return objective
    return "softmax" if num_classes == 2 else "one_vs_rest"


@keras.saving.register_keras_serializable(package=PACKAGE)
class ObjectiveCrossentropy(keras.losses.Loss):
    """The loss of ``model.objective=auto`` (``loss=objective``): the softmax's cross-entropy for two classes,
    :class:`OneVsRestCrossentropy` for more, as :func:`objective_for` builds the output it scores."""

    def __init__(self, name="objective_crossentropy", reduction="sum_over_batch_size", dtype=None):
        super().__init__(name=name, reduction=reduction, dtype=dtype)

    def call(self, y_true, y_pred):
        if objective_for("auto", y_pred.shape[-1]) == "softmax":
            return keras.losses.sparse_categorical_crossentropy(y_true, y_pred)
        return OneVsRestCrossentropy().call(y_true, y_pred)


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
    text, which :meth:`text_inputs` makes (the pipeline, the SavedModel and the analysis tools call it).
    ``ngram_branch`` is the bag: a layer, or what makes one from the class count (``ngram_branch(num_classes)``:
    a config's ``_partial_`` node).

    Example:
    >>> from mha_project.extras.ngrams.layers import BagOfNgrams
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
        ngram_branch,
        encoder_logit_dropout: float = 0.0,
        objective: str = "softmax",
        choice_epochs: int = 2,
        **kwargs,
    ):
        if not isinstance(ngram_branch, NgramLayer):
            ngram_branch = ngram_branch(num_classes=num_classes, name="ngram_branch")
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
        activation = "softmax" if objective_for(objective, num_classes) == "softmax" else "sigmoid"
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
        self.choice_epochs = choice_epochs

    def adapt(self, batches, validation=None, earlier: dict | None = None) -> dict:
        """A linear bag's feature weights (naive-Bayes ratios, idf), from the training split's batches; with
        ``c="auto"``, its C chosen on ``validation`` (:func:`choose_c`), or as ``earlier`` (what this returned in
        the run before a resume) says. Returns what was chosen, ``{"ngram_c": {...}}``, for the run's record."""
        bag = self.ngram_branch
        if not isinstance(bag, LinearNgramLayer):
            return {}
        if bag.c == "auto":
            batches = batches.cache()  # each text's n-grams read once: this pass fills it, the grid's epochs reuse it
        bag.adapt(batches.as_numpy_iterator())
        if bag.c != "auto":
            return {}
        chosen = (earlier or {}).get("ngram_c") or choose_c(
            bag, batches, validation, objective_for(self.objective, self.num_classes), self.choice_epochs
        )
        bag.c = float(chosen["c"])
        return {"ngram_c": chosen}

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
            "choice_epochs": self.choice_epochs,
        }

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        for part in ("backbone", "ngram_branch"):
            if config.get(part) is not None:
                config[part] = keras.layers.deserialize(config[part])
        return cls(**config)


# The grid's rate: the bag alone trains fast (linear, from zero). Which C wins depends on how far each bag has
# trained (the stronger penalties reach their optimum first), so the grid trains as far as the fit will train the
# bag: ``epochs`` at this constant rate against the fit's epochs on a decaying schedule (model.choice_epochs).
CHOICE_LR = 0.01


def choose_c(
    bag: LinearNgramLayer, batches, validation, objective: str, epochs: int, batch_size=None, learning_rate=CHOICE_LR
) -> dict:
    """The C of ``C_GRID`` whose bag, trained alone on ``batches`` for ``epochs`` (its features as ``bag.adapt``
    left them), scores the lowest validation log-loss (ties: the stronger penalty); each C's loss and accuracy
    beside it. Log-loss, not accuracy (``LogisticRegressionCV(scoring="neg_log_loss")``): on a few hundred
    validation texts accuracy moves in steps of one text and ties across the grid, where the loss still ranks the
    C's. The grid's bags train side by side in one model, one output each: one pass over the data, one traced step."""
    if validation is None:
        raise ValueError("c='auto' chooses the bag's C on validation: give the validation batches")
    start = time.perf_counter()
    names = [f"c_{i}" for i in range(len(C_GRID))]
    ngrams = keras.Input(shape=(None, 2), dtype="int32", name="ngrams")
    activation = "softmax" if objective == "softmax" else "sigmoid"
    # Only the kept n-grams: the rows of the table that no n-gram reaches would only cost updates.
    grid = [bag.cut_to_kept(c=c, name=f"bag_{name}") for c, name in zip(C_GRID, names)]
    model = keras.Model(
        ngrams, {name: layers.Activation(activation, dtype="float32", name=name)(alone(ngrams))
                 for name, alone in zip(names, grid)},
    )  # fmt: skip
    loss = "sparse_categorical_crossentropy" if objective == "softmax" else OneVsRestCrossentropy()
    model.compile(
        optimizer=keras.optimizers.Adam(learning_rate),
        loss={n: loss for n in names},
        metrics={n: ["accuracy"] for n in names},
    )
    train, val = (
        ds.map(lambda inputs, labels: (inputs["ngrams"], {n: labels for n in names})) for ds in (batches, validation)
    )
    if batch_size is not None:  # other batches than the run's (benchmarks/grid_batch.py)
        train = train.unbatch().padded_batch(batch_size)
    model.fit(train.shuffle(64, seed=0), epochs=epochs, verbose=0, shuffle=False)
    result = model.evaluate(val, verbose=0, return_dict=True)
    losses = [float(result[f"{name}_loss"]) for name in names]  # the data's loss alone, without the penalty
    best = int(np.argmin(losses))  # the first of the best: the smallest C, the strongest penalty
    return {
        "c": C_GRID[best], "grid": list(C_GRID), "val_loss": losses,
        "val_accuracy": [float(result[f"{name}_accuracy"]) for name in names], "epochs": epochs,
        "seconds": round(time.perf_counter() - start, 1),  # what the choice cost, beside the fit's own time
    }  # fmt: skip


def bag_optimizer(learning_rate, ngram_lr: float | None = None, **adamw):
    """AdamW on ``learning_rate``; with ``ngram_lr``, the bag (the variables under ``ngram_branch/``) gets its own
    AdamW on the same schedule peaking there (``keras.optimizers.MultiOptimizer``): a bag of n-grams learns at
    several times the rate that suits the encoder, and one shared rate leaves one of the two off its best."""
    if ngram_lr is None:
        return keras.optimizers.AdamW(learning_rate=learning_rate, **adamw)
    bag_schedule = type(learning_rate).from_config({**learning_rate.get_config(), "peak": ngram_lr})
    return keras.optimizers.MultiOptimizer(
        keras.optimizers.OptimizerMap(
            keras.optimizers.AdamW(learning_rate=learning_rate, **adamw),
            {"ngram_branch/.*": keras.optimizers.AdamW(learning_rate=bag_schedule, **adamw)},
        )
    )
