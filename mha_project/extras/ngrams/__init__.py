"""Wide and deep (``model.ngram_branch=bigram``, ``bigram_alone``; ``model.ngram_*``): a bag of every n-gram
of the whole text beside the encoder, or alone (``layers.py``: a fastText bag, naive-Bayes-weighted or TF-IDF
features), their logits added (``classifier.py``: ``WideAndDeepClassifier``), under one softmax or one
sigmoid per class (``model.ngram_objective``). Registered with the core: the classifier it builds, the inputs
it reads from the raw text, the feature weights it learns before the fit, the bag's own learning rate, the
one-vs-rest loss, its checks and Keras classes. docs/ngrams.md has the measurements."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Optional

from mha_project.config import checked, positive_int
from mha_project.errors import ConfigError
from mha_project.extending import (
    CLASSIFIERS,
    HPARAMS,
    LOSSES,
    MODEL_READY,
    NO_ATTENTION,
    OPTIMIZERS,
    TEXT_INPUTS,
    config_check,
    keras_module,
    settings,
)
from mha_project.extras.ngrams.options import NGRAM_BRANCHES, NGRAM_OBJECTIVES, NGRAM_WEIGHTINGS


@settings("model")
@dataclass
class NgramSettings:
    ngram_branch: str = checked(lambda v: v in NGRAM_BRANCHES, "one of " + ", ".join(NGRAM_BRANCHES))
    ngram_features: int = checked(lambda v: positive_int(v) and v >= 2, "an integer >= 2")
    ngram_max_n: int = checked(lambda v: v in (1, 2, 3), "1, 2 or 3")
    ngram_dim: int = checked(positive_int, "an integer >= 1")
    ngram_weighting: str = checked(lambda v: v in NGRAM_WEIGHTINGS, "one of " + ", ".join(NGRAM_WEIGHTINGS))
    ngram_c: float = checked(lambda v: math.isfinite(v) and v > 0, "a number > 0")
    encoder_logit_dropout: float = checked(lambda v: 0.0 <= v < 1.0, "a number in [0, 1)")
    ngram_objective: str = checked(lambda v: v in NGRAM_OBJECTIVES, "one of " + ", ".join(NGRAM_OBJECTIVES))


@settings("trainer")
@dataclass
class NgramTrainerSettings:
    ngram_lr: Optional[float] = checked(lambda v: v is None or (math.isfinite(v) and v > 0), "null or a number > 0")


def no_attention(cfg):
    if cfg.model.get("ngram_branch") == "bigram_alone":
        return (
            "was trained with model.ngram_branch=bigram_alone: its model is a bag of n-grams without attention "
            "layers, so there is no attention to inspect; use a run with an encoder"
        )
    return None


def build(model_cfg, vocab_size: int, num_classes: int, backbone=None, dtype=None):
    if model_cfg.get("ngram_branch", "none") == "none":
        return None
    from mha_project.extras.ngrams.classifier import build_wide_and_deep

    return build_wide_and_deep(model_cfg, vocab_size, num_classes, backbone, dtype)


def ready(cfg, model, inputs) -> None:
    if cfg.model.ngram_branch != "none" and cfg.model.ngram_weighting != "none":
        from mha_project.extras.ngrams.classifier import adapt_bag

        adapt_bag(cfg, model, inputs)


def text_inputs(cfg):
    if cfg.model.get("ngram_branch", "none") == "none":
        return None
    import functools

    from mha_project.extras.ngrams.layers import ngram_inputs

    return functools.partial(ngram_inputs, max_n=cfg.model.ngram_max_n)


def loss(model):
    if getattr(model, "objective", "softmax") == "softmax":
        return None
    from mha_project.extras.ngrams.classifier import OneVsRestCrossentropy

    return OneVsRestCrossentropy()


def optimizer(model, trainer_cfg, adamw):
    if trainer_cfg.get("ngram_lr") is None:
        return None
    from mha_project.extras.ngrams.classifier import bag_optimizer

    return bag_optimizer(model, trainer_cfg, adamw)


@config_check
def check_ngrams(cfg) -> None:
    model = cfg.model
    if model.ngram_branch != "none":
        # The fastText bag's table, its gradient and AdamW's two moments, float32, known before anything loads;
        # the linear bags: one scale, one weight, its gradient and two moments per (feature, class), for up to
        # 5 classes before the data says how many.
        width = 5 * 5 if model.ngram_weighting != "none" else model.ngram_dim
        need = 4 * 4 * model.ngram_features * width
        have = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        if need > have:
            raise ConfigError(
                f"model.ngram_features={model.ngram_features} is invalid here: its table (x model.ngram_dim="
                f"{model.ngram_dim}, with its gradient and optimizer state) would need about {need / 2**30:,.0f} "
                f"GiB against this machine's {have / 2**30:,.0f} GiB; lower model.ngram_features (default 1048576)"
            )
    if model.ngram_weighting != "none" and model.ngram_branch == "none":
        raise ConfigError(
            f"model.ngram_weighting={model.ngram_weighting} is invalid with model.ngram_branch=none: it "
            "weights the n-gram branch's features; add model.ngram_branch=bigram (or bigram_alone)"
        )
    if model.ngram_objective != "softmax" and model.ngram_branch == "none":
        raise ConfigError(
            f"model.ngram_objective={model.ngram_objective} is invalid with model.ngram_branch=none: it is the "
            "objective of the wide-and-deep classifier; add model.ngram_branch=bigram (or bigram_alone)"
        )
    if cfg.trainer.ngram_lr is not None and model.ngram_branch == "none":
        raise ConfigError(
            f"trainer.ngram_lr={cfg.trainer.ngram_lr} is invalid with model.ngram_branch=none: it is the n-gram "
            "branch's learning rate; add model.ngram_branch=bigram or leave trainer.ngram_lr=null"
        )


HPARAMS["ngram_lr"] = "trainer.ngram_lr"
NO_ATTENTION.append(no_attention)
CLASSIFIERS.append(build)
MODEL_READY.append(ready)
TEXT_INPUTS.append(text_inputs)
OPTIMIZERS.append(optimizer)
LOSSES.append(loss)
keras_module("mha_project.extras.ngrams.layers")
keras_module("mha_project.extras.ngrams.classifier")
