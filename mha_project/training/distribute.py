"""tf.distribute strategies for ``trainer.distribution``.

The configured ``batch_size`` is the *global* batch: Keras splits each batch across the replicas,
so changing the number of devices does not change the optimisation."""

from __future__ import annotations

import tensorflow as tf

from mha_project.config import MULTI_WORKER_UNSUPPORTED
from mha_project.errors import ConfigError


def make_strategy(name: str):
    if name == "none":
        return tf.distribute.get_strategy()  # the default (no-op) strategy
    if name == "mirrored":
        # All local GPUs; without GPUs, every logical CPU device (see use_logical_cpus).
        gpus = tf.config.list_logical_devices("GPU")
        devices = [d.name for d in (gpus or tf.config.list_logical_devices("CPU"))]
        return tf.distribute.MirroredStrategy(devices=devices)
    if name == "multi_worker":
        # Keras 3's model.fit fails under MultiWorkerMirroredStrategy ("Attempt to convert a value
        # (PerReplica...)"), reproduced here with two workers on 127.0.0.1 and reported upstream as
        # keras-team/keras#20585 / tensorflow/tensorflow#72388. Refuse in one line instead of crashing.
        raise ConfigError(MULTI_WORKER_UNSUPPORTED)
    raise ConfigError(f"trainer.distribution={name} is invalid: must be one of none, mirrored, multi_worker")


def use_logical_cpus(count: int) -> None:
    """Split the CPU into ``count`` logical devices (must run before TensorFlow initialises devices)."""
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * count)
