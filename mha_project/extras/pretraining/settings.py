"""The pretraining extra's settings (the ``pretrain:`` group, joined to the schema through
``extending.settings``) and the words its modules share; cheap to import (no TensorFlow)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import List, Optional

from omegaconf import MISSING

from mha_project.config import checked, positive_int
from mha_project.extending import settings

MASK_TOKEN = "[MASK]"  # text never produces it: the default standardisation strips the brackets
OBJECTIVES = ("none", "mlm", "electra")  # pretrain.objective


@dataclass
class PretrainConfig:
    objective: str = checked(lambda v: v in OBJECTIVES, "one of " + ", ".join(OBJECTIVES), shown="pretrain")
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
    from_run: Optional[str] = checked(lambda v: v is None or v != "", "null or a run directory")
    probe_texts: List[str] = MISSING
    generator_size: Optional[float] = checked(lambda v: v is None or 0 < v <= 1, "a number in (0, 1]")
    discriminator_weight: Optional[float] = checked(lambda v: v is None or v > 0, "a number > 0")


@settings("")  # a top-level group: pretrain:
@dataclass
class PretrainSettings:
    pretrain: PretrainConfig = field(default_factory=PretrainConfig)


def uses_pretraining(cfg) -> bool:
    """Whether this run pretrains (``pretrain=mlm``) or starts from a pretrained run (``pretrain.from_run``)."""
    return cfg.pretrain.objective != "none" or bool(cfg.pretrain.from_run)
