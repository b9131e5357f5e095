"""The wide-and-deep classifier's settings (``model=wide_deep``: ``WideAndDeepClassifier``'s arguments, its bag's
in ``model/ngram_branch``) and the bag's learning rate (``optimizer=wide_deep``), with their checks; no TensorFlow."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any, Optional

from omegaconf import MISSING

from mha_project.config import (
    MONITORS,
    TRUNCATIONS,
    AdamWConfig,
    ClassifierConfig,
    checked,
    one_of,
    optional,
    positive_int,
    store,
)
from mha_project.errors import ConfigError
from mha_project.extras.ngrams.options import NGRAM_OBJECTIVES

ONE_VS_REST_LOSS = "mha_project.extras.ngrams.classifier.OneVsRestCrossentropy"
OBJECTIVE_LOSS = "mha_project.extras.ngrams.classifier.ObjectiveCrossentropy"


@dataclass
class NgramBranchConfig:
    """A bag's arguments (``layers.py``) but the class count, which the classifier gives it (``_partial_``)."""

    _target_: str = MISSING
    _partial_: bool = MISSING
    features: int = checked(lambda v: positive_int(v) and v >= 2, "an integer >= 2")
    max_n: int = checked(lambda v: v in (1, 2, 3), "1, 2 or 3")
    dtype: str = MISSING


@dataclass
class LinearBagConfig(NgramBranchConfig):
    """``NaiveBayesNgrams`` / ``TfidfNgrams``: a linear layer penalised as scikit-learn's LogisticRegression(C)."""

    c: Any = checked(
        lambda v: v == "auto" or (isinstance(v, (int, float)) and math.isfinite(v) and v > 0),
        "a number > 0, or auto (chosen on the validation split)",
    )


@dataclass
class MeanBagConfig(NgramBranchConfig):
    """``BagOfNgrams``: fastText's mean embedding of the hashed n-grams, ``dim`` wide."""

    dim: int = checked(positive_int, "an integer >= 1")


@dataclass
class WideAndDeepConfig(ClassifierConfig):
    ngram_branch: Any = MISSING
    encoder_logit_dropout: float = checked(lambda v: 0.0 <= v < 1.0, "a number in [0, 1)")
    objective: str = checked(lambda v: v in NGRAM_OBJECTIVES, one_of(NGRAM_OBJECTIVES))
    choice_epochs: int = checked(positive_int, "an integer >= 1")

    @staticmethod
    def check(model, cfg) -> None:
        if model.backbone is not None:
            ClassifierConfig.check(model, cfg)
        bag = model.ngram_branch
        # The bag's table, its gradient and AdamW's two moments, float32, known before anything loads; the linear
        # bags: one scale, one weight, its gradient and two moments per (feature, class), for up to 5 classes
        # before the data says how many.
        width = 5 * 5 if "c" in bag else bag.dim
        need = 4 * 4 * bag.features * width
        have = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        if need > have:
            raise ConfigError(
                f"model.ngram_branch.features={bag.features} is invalid here: its table (with its gradient and "
                f"optimizer state) would need about {need / 2**30:,.0f} GiB against this machine's "
                f"{have / 2**30:,.0f} GiB; lower model.ngram_branch.features (default 1048576)"
            )
        loss = cfg.loss.get("_target_")
        wanted = {"one_vs_rest": ONE_VS_REST_LOSS, "auto": OBJECTIVE_LOSS}.get(model.objective)
        if wanted != loss and (wanted is not None or loss in (ONE_VS_REST_LOSS, OBJECTIVE_LOSS)):
            raise ConfigError(
                f"model.objective={model.objective} is invalid with loss={loss}: a sigmoid per class trains with "
                "loss=one_vs_rest, one softmax with the cross-entropy (loss=cross_entropy), auto with loss=objective"
            )


@dataclass
class BagOptimizerConfig(AdamWConfig):
    ngram_lr: Optional[float] = checked(optional(lambda v: math.isfinite(v) and v > 0), "null or a number > 0")

    @staticmethod
    def check(optimizer, cfg) -> None:
        if optimizer.ngram_lr is not None and "ngram_branch" not in cfg.model:
            raise ConfigError(
                f"optimizer.ngram_lr={optimizer.ngram_lr} is invalid with a model without a bag of n-grams: it is "
                "the bag's learning rate; add model=wide_deep, or leave optimizer.ngram_lr=null"
            )


@dataclass
class LongFitConfig:
    """``LongFit``'s arguments: the fit for ``min_classes`` classes or more."""

    _target_: str = MISSING
    min_classes: int = checked(lambda v: positive_int(v) and v >= 2, "an integer >= 2")
    epochs: int = checked(positive_int, "an integer >= 1")
    early_stopping_patience: int = checked(lambda v: v >= 0, "an integer >= 0")
    monitor: str = checked(lambda v: v in MONITORS, one_of(MONITORS))
    ngram_lr: float = checked(lambda v: math.isfinite(v) and v > 0, "a number > 0")
    choice_epochs: int = checked(positive_int, "an integer >= 1")


@dataclass
class LongTextFitConfig:
    """``LongTextFit``'s arguments: the fit for long texts; each value as its own key's schema allows it."""

    _target_: str = MISSING
    min_median_words: int = checked(positive_int, "an integer >= 1")
    sample: int = checked(positive_int, "an integer >= 1")
    max_n: int = checked(lambda v: v in (1, 2, 3), "1, 2 or 3")
    features: int = checked(lambda v: positive_int(v) and v >= 2, "an integer >= 2")
    seq_len: int = checked(lambda v: positive_int(v) and v >= 2, "an integer >= 2")
    truncation: str = checked(lambda v: v in TRUNCATIONS, one_of(TRUNCATIONS))
    epochs: int = checked(positive_int, "an integer >= 1")
    validations_per_epoch: int = checked(positive_int, "an integer >= 1")
    warmup_fraction: float = checked(lambda v: 0 <= v < 1, "a number in [0, 1)")
    early_stopping_patience: int = checked(lambda v: v >= 0, "an integer >= 0")


@dataclass
class FitFromDataConfig:
    """``trainer/schedule_from_data=wide_deep``: ``FitFromData``'s fits; what they set must be settings of the run."""

    _target_: str = MISSING
    many_classes: LongFitConfig = MISSING
    long_texts: LongTextFitConfig = MISSING

    @staticmethod
    def check(node, cfg) -> None:
        if "ngram_lr" not in cfg.optimizer or "ngram_branch" not in cfg.model:
            raise ConfigError(
                "trainer/schedule_from_data=wide_deep is invalid without a bag of n-grams and its learning rate "
                "(model.ngram_branch, optimizer.ngram_lr): add experiment=wide_deep, or trainer.schedule_from_data=null"
            )


store("wide_deep_schema", WideAndDeepConfig, at="model")
store("linear_bag_schema", LinearBagConfig, at="model.ngram_branch")
store("mean_bag_schema", MeanBagConfig, at="model.ngram_branch")
store("bag_optimizer_schema", BagOptimizerConfig, at="optimizer")
store("fit_from_data_schema", FitFromDataConfig, at="trainer.schedule_from_data")
