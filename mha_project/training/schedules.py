"""The learning-rate schedule every stage trains with: linear warm-up, then cosine decay to 0."""

from __future__ import annotations

import math

import keras
from keras import ops

from mha_project import PACKAGE


@keras.saving.register_keras_serializable(package=PACKAGE)
class WarmupCosine(keras.optimizers.schedules.LearningRateSchedule):
    """``peak * step / warmup_steps`` during the warm-up, then ``peak * (1 + cos(pi * t)) / 2`` with
    ``t`` going from 0 to 1 over ``decay_steps``, then 0.

    The values are those of ``keras.optimizers.schedules.CosineDecay(0, decay_steps,
    warmup_target=peak, warmup_steps=warmup_steps)`` (a test compares them), written with
    ``ops.where`` instead of ``ops.cond``: AdamW evaluates its schedule once per weight-decayed
    variable, so every train step's graph would hold one ``cond`` (two sub-graphs) per variable, and
    tracing them would be a large part of the first step.

    Args:
        peak: the learning rate at the end of the warm-up.
        warmup_steps: steps of the linear warm-up (0: start at ``peak``).
        decay_steps: steps of the cosine decay after the warm-up.

    >>> schedule = WarmupCosine(peak=1.0, warmup_steps=2, decay_steps=4)
    >>> [round(float(schedule(s)), 3) for s in range(8)]
    [0.0, 0.5, 1.0, 0.854, 0.5, 0.146, 0.0, 0.0]
    """

    def __init__(self, peak: float, warmup_steps: int, decay_steps: int):
        self.peak = float(peak)
        self.warmup_steps = int(warmup_steps)
        self.decay_steps = max(1, int(decay_steps))

    def __call__(self, step):
        step = ops.cast(step, "float32")
        warmup = self.peak * step / max(1, self.warmup_steps)
        progress = ops.minimum(ops.maximum(step - self.warmup_steps, 0.0), self.decay_steps) / self.decay_steps
        cosine = self.peak * (0.5 * (1.0 + ops.cos(math.pi * progress)))
        return ops.where(step < self.warmup_steps, warmup, cosine)

    def get_config(self) -> dict:
        return {"peak": self.peak, "warmup_steps": self.warmup_steps, "decay_steps": self.decay_steps}


def warmup_cosine(lr: float, warmup_fraction: float, total_steps: int) -> WarmupCosine:
    """A linear warm-up over ``warmup_fraction`` of ``total_steps``, then cosine decay to 0."""
    warmup_steps = int(warmup_fraction * total_steps)
    return WarmupCosine(peak=lr, warmup_steps=warmup_steps, decay_steps=total_steps - warmup_steps)
