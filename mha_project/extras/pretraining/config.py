"""The pretraining stage's settings (``pretrain=mlm|electra|from_run``: ``PretrainingStage``'s arguments) and their
checks, and the word its modules share; no TensorFlow."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Optional

from omegaconf import MISSING, OmegaConf

from mha_project.config import checked, keras_backend, one_of, optional, positive_int, store
from mha_project.errors import ConfigError

MASK_TOKEN = "[MASK]"  # text never produces it: the default standardisation strips the brackets
OBJECTIVES = ("none", "mlm", "electra")  # pretrain.objective (none: pretrain.from_run's backbone)


@dataclass
class PretrainConfig:
    _target_: str = MISSING
    objective: str = checked(lambda v: v in OBJECTIVES, one_of(OBJECTIVES))
    epochs: int = checked(positive_int, "an integer >= 1")
    batch_size: int = checked(positive_int, "an integer >= 1")
    lr: float = checked(lambda v: math.isfinite(v) and v > 0, "a number > 0")
    warmup_fraction: float = checked(lambda v: 0 <= v < 1, "a number in [0, 1)")
    weight_decay: float = checked(lambda v: v >= 0, "a number >= 0")
    clipnorm: float = checked(lambda v: math.isfinite(v) and v > 0, "a number > 0")
    mask_rate: float = checked(lambda v: 0 < v < 1, "a number in (0, 1)")
    dropout: float = checked(lambda v: 0 <= v < 1, "a number in [0, 1)")
    tie_embeddings: bool = MISSING
    extra_unlabeled: bool = MISSING
    from_run: Optional[str] = checked(optional(lambda v: v != ""), "null or a run directory")
    probe_texts: list[str] = MISSING
    generator_size: Optional[float] = checked(optional(lambda v: 0 < v <= 1), "a number in (0, 1]")
    discriminator_weight: Optional[float] = checked(optional(lambda v: v > 0), "a number > 0")

    @staticmethod
    def check(pretrain, cfg) -> None:
        probes = pretrain.probe_texts

        def has_mask(text) -> bool:
            return isinstance(text, str) and "[mask]" in text.lower()

        if not OmegaConf.is_list(probes) or not all(has_mask(t) for t in probes):
            bad = probes if not OmegaConf.is_list(probes) else next(t for t in probes if not has_mask(t))
            raise ConfigError(
                f"pretrain.probe_texts has {bad!r}: each probe must be a sentence with [MASK] where a word goes"
            )
        if pretrain.extra_unlabeled and pretrain.objective == "none":
            raise ConfigError("pretrain.extra_unlabeled=true needs a pretraining stage: add pretrain=mlm")
        if pretrain.objective == "electra" and keras_backend() != "tensorflow":
            raise ConfigError(
                f"pretrain=electra is invalid with KERAS_BACKEND={keras_backend()}: its train step "
                "(two losses and a sampling step) is written in TensorFlow; use pretrain=mlm there"
            )
        if pretrain.objective == "electra":
            for key, allowed in (("generator_size", "a number in (0, 1]"), ("discriminator_weight", "a number > 0")):
                if pretrain[key] is None:
                    raise ConfigError(f"pretrain.{key}=null is invalid with pretrain=electra: must be {allowed}")
        source = pretrain.from_run
        if source is not None and pretrain.objective != "none":
            raise ConfigError(
                f"pretrain.from_run={source} reuses that run's pretrained backbone, so this run does not pretrain: "
                f"drop pretrain={pretrain.objective} (or pretrain.from_run)"
            )
        if source is not None and not os.path.isdir(source):
            raise ConfigError(f"pretrain.from_run={source} does not exist or is not a directory")
        if cfg.model.backbone is None and (pretrain.objective != "none" or source):
            raise ConfigError(
                "model.backbone=null is invalid with pretraining: a bag of n-grams alone has no encoder to pretrain; "
                "keep the encoder beside the bag"
            )
        processes = os.environ.get("KERAS_DISTRIBUTION_NUM_PROCESSES", "1")
        if processes.isdigit() and int(processes) > 1 and pretrain.objective != "none":
            raise ConfigError(f"pretrain={pretrain.objective} is invalid with {processes} processes: pretrain on one")


store("pretrain_schema", PretrainConfig, at="pretrain")


# `${pretrain_reserved:${pretrain.objective},${pretrain.from_run}}` (configs/pretrain/*.yaml): data.reserved_words.
OmegaConf.register_new_resolver(
    "pretrain_reserved",
    lambda objective, from_run: [MASK_TOKEN] if objective != "none" or from_run else [],
    replace=True,
)
