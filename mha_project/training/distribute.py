"""The devices a run trains on, for ``trainer.distribution``.

The configured ``batch_size`` is the *global* batch: Keras splits each batch across the replicas (or the
processes), so changing the number of devices does not change the optimisation.

* ``mirrored``: ``tf.distribute.MirroredStrategy`` over the local GPUs (or logical CPUs), TensorFlow backend.
* ``data_parallel``: ``keras.distribution.DataParallel`` on the JAX backend, over this machine's devices
  and, when Keras's ``KERAS_DISTRIBUTION_JOB_ADDRESSES`` / ``_NUM_PROCESSES`` / ``_PROCESS_ID`` are set,
  over several processes (JAX's distributed runtime; gloo collectives on CPU). Each process reads its own
  shard of the training texts (:func:`shard_of`)."""

from __future__ import annotations

import contextlib
import dataclasses
import os

import numpy as np
import tensorflow as tf

from mha_project.config import MULTI_WORKER_UNSUPPORTED, processes
from mha_project.errors import ConfigError


@dataclasses.dataclass
class KerasDistribution:
    """What stages.py asks of a tf.distribute strategy, for keras.distribution (which needs no scope)."""

    num_replicas_in_sync: int
    process_id: int = 0
    num_processes: int = 1

    def scope(self):
        return contextlib.nullcontext()


def make_strategy(name: str):
    if name == "none":
        return tf.distribute.get_strategy()  # the default (no-op) strategy
    if name == "mirrored":
        # All local GPUs; without GPUs, every logical CPU device (see use_logical_cpus).
        gpus = tf.config.list_logical_devices("GPU")
        devices = [d.name for d in (gpus or tf.config.list_logical_devices("CPU"))]
        return tf.distribute.MirroredStrategy(devices=devices)
    if name == "data_parallel":
        return _data_parallel()
    if name == "multi_worker":
        # Keras 3's model.fit fails under MultiWorkerMirroredStrategy ("Attempt to convert a value
        # (PerReplica...)"), reproduced here with two workers on 127.0.0.1 and reported upstream as
        # keras-team/keras#20585 / tensorflow/tensorflow#72388. Refuse in one line instead of crashing.
        raise ConfigError(MULTI_WORKER_UNSUPPORTED)
    raise ConfigError(f"trainer.distribution={name} is invalid: must be one of none, mirrored, data_parallel")


def _data_parallel() -> KerasDistribution:
    import jax
    import keras

    if processes() > 1:
        # JAX's CPU collectives default to none: processes on CPUs talk through gloo.
        jax.config.update("jax_cpu_collectives_implementation", os.environ.get("JAX_CPU_COLLECTIVES", "gloo"))
        keras.distribution.initialize()  # reads KERAS_DISTRIBUTION_JOB_ADDRESSES, _NUM_PROCESSES, _PROCESS_ID
    devices = keras.distribution.list_devices()
    # Each process feeds its own shard (shard_of), so Keras must not shard the datasets again.
    keras.distribution.set_distribution(keras.distribution.DataParallel(devices=devices, auto_shard_dataset=False))
    return KerasDistribution(len(devices), jax.process_index(), jax.process_count())


def shard_of(count: int, process_id: int, num_processes: int) -> np.ndarray:
    """The training examples process ``process_id`` reads: every ``num_processes``-th, the same number for
    every process (the last ``count % num_processes`` examples are left out), so all step together.

    >>> shard_of(7, 0, 2).tolist(), shard_of(7, 1, 2).tolist()
    ([0, 2, 4], [1, 3, 5])
    """
    per_process = count // num_processes
    return np.arange(process_id, per_process * num_processes, num_processes)


def use_logical_cpus(count: int) -> None:
    """Split the CPU into ``count`` logical devices (must run before TensorFlow initialises devices)."""
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * count)
