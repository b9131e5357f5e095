"""The devices a run trains on (``trainer/strategy=mirrored|data_parallel``: the ``_target_`` of
``trainer.strategy``), and the processes that train it together.

The configured ``batch_size`` is the *global* batch: Keras splits each batch across the replicas (or the
processes), so changing the number of devices does not change the optimisation.

* :func:`mirrored`: ``tf.distribute.MirroredStrategy`` over the local GPUs (or logical CPUs), TensorFlow backend.
* :func:`data_parallel`: ``keras.distribution.DataParallel`` on the JAX backend, over this machine's devices
  and, when Keras's ``KERAS_DISTRIBUTION_JOB_ADDRESSES`` / ``_NUM_PROCESSES`` / ``_PROCESS_ID`` are set,
  over several processes (JAX's distributed runtime; gloo collectives on CPU). Each process feeds its
  slice of every global batch (``part`` in :func:`mha_project.data.pipeline.batch_token_ids`); after
  ``fit``, each process tests, saves and exports its :meth:`KerasDistribution.local_copy` of the weights
  into its own run directory."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import sys
import threading

import keras
import numpy as np
import tensorflow as tf

from mha_project.errors import ConfigError
from mha_project.extras.distribution.processes import processes
from mha_project.model.classifier import uncompiled_copy

log = logging.getLogger(__name__)


@dataclasses.dataclass
class KerasDistribution:
    """What ``train`` asks of a tf.distribute strategy, for keras.distribution (which needs no scope), and what it
    asks of one that trains over several processes: which process this is, of how many, and the model as this
    process alone may run it."""

    num_replicas_in_sync: int
    process_id: int = 0
    num_processes: int = 1

    def scope(self):
        return contextlib.nullcontext()

    def local_copy(self, model):
        """After ``fit``: the trained weights on this process's devices alone (what follows is this process's
        own work, and Keras is told of no distribution from here on)."""
        if not several_processes():
            return model
        copy = local_copy(model)
        keras.distribution.set_distribution(None)
        return copy

    @contextlib.contextmanager
    def local(self, model):
        """``model`` itself, or with several processes its :func:`local_copy`, run without a distribution
        (the attention logged during the fit)."""
        if not several_processes():
            yield model
            return
        with no_distribution():
            yield local_copy(model)


def mirrored(batch_size: int, cpu_devices: int | None = None):
    """``tf.distribute.MirroredStrategy`` over every local GPU, or without GPUs every logical CPU device
    (``cpu_devices``: split the CPU into that many, to try it without GPUs)."""
    if cpu_devices:
        use_logical_cpus(cpu_devices)
    gpus = tf.config.list_logical_devices("GPU")
    strategy = tf.distribute.MirroredStrategy(devices=[d.name for d in (gpus or tf.config.list_logical_devices("CPU"))])
    return _checked(strategy, batch_size, "mirrored")


def data_parallel(batch_size: int, join_timeout: int = 300) -> KerasDistribution:
    """``keras.distribution.DataParallel`` over this machine's devices, and over several processes when Keras's
    ``KERAS_DISTRIBUTION_*`` variables say so (each process waits ``join_timeout`` seconds for the others)."""
    return _checked(_data_parallel(join_timeout), batch_size, "data_parallel")


def _checked(strategy, batch_size: int, name: str):
    replicas = strategy.num_replicas_in_sync
    if batch_size < replicas:
        raise ConfigError(
            f"batch_size={batch_size} is invalid with {replicas} replicas: the global batch is split across "
            f"replicas, so it must be >= {replicas}"
        )
    log.info(f"distribution: {name} · replicas {replicas} · global batch {batch_size}")
    return strategy


def _data_parallel(join_timeout: int) -> KerasDistribution:
    import jax  # only on the JAX backend

    if processes() > 1:
        # JAX's CPU collectives default to none: processes on CPUs talk through gloo.
        jax.config.update("jax_cpu_collectives_implementation", os.environ.get("JAX_CPU_COLLECTIVES", "gloo"))
        join_processes(join_timeout)
    devices = keras.distribution.list_devices()
    # Each process feeds its own slice of each batch, so Keras must not shard the datasets again.
    keras.distribution.set_distribution(keras.distribution.DataParallel(devices=devices, auto_shard_dataset=False))
    return KerasDistribution(len(devices), jax.process_index(), jax.process_count())


def join_processes(timeout: int) -> None:
    """Join the other processes through JAX's distributed runtime, as ``keras.distribution.initialize`` does
    from Keras's ``KERAS_DISTRIBUTION_*`` variables, saying what it waits for; one line after ``timeout``
    seconds without them. JAX itself ends a process whose peers never come with an abort and a C++ stack
    trace, which no Python code can catch: a watchdog thread gives up first (the seeds, set right after,
    are the same in every process, which is what Keras's own initialisation of them is for)."""
    import jax

    n, process_id = processes(), int(os.environ["KERAS_DISTRIBUTION_PROCESS_ID"])
    address = os.environ["KERAS_DISTRIBUTION_JOB_ADDRESSES"].split(",")[0]
    role = "coordinating: it listens on every interface" if process_id == 0 else "process 0 coordinates there"
    log.info(f"process {process_id} of {n}: waiting up to {timeout} s for the others at {address} ({role})")
    joined = threading.Event()

    def give_up() -> None:
        if not joined.wait(timeout):
            print(
                f"error: process {process_id} of {n} waited {timeout} s at {address} and the other processes did not "
                "join: start the same command on each machine with its own KERAS_DISTRIBUTION_PROCESS_ID, or raise "
                "trainer.strategy.join_timeout",
                file=sys.stderr,
                flush=True,
            )
            os._exit(2)

    threading.Thread(target=give_up, name="join-timeout", daemon=True).start()
    # JAX's preemption service takes SIGTERM for itself (a checkpoint notice): the command's own handler stops it.
    jax.config.update("jax_enable_preemption_service", False)
    jax.distributed.initialize(address, n, process_id, initialization_timeout=timeout + 60)
    joined.set()


def several_processes() -> bool:
    """Whether this process trains together with others (keras.distribution over several JAX processes)."""
    if keras.backend.backend() != "jax" or keras.distribution.distribution() is None:
        return False
    import jax

    return jax.process_count() > 1


@contextlib.contextmanager
def no_distribution():
    """Keras is told of no distribution inside: models built and run here live on this process alone."""
    distribution = keras.distribution.distribution()
    keras.distribution.set_distribution(None)
    try:
        yield
    finally:
        keras.distribution.set_distribution(distribution)


def local_copy(model):
    """A copy of ``model`` on this process's devices alone, with the weights it holds now.

    When several processes train a model, its weights are replicated arrays spanning every process's
    devices: a computation on them is a collective that all processes must run, so process 0's attention
    logging, test, save and export alone would wait for the others, or fail. Each process holds every
    replicated weight whole, so the copy needs no communication.
    """
    values = [np.asarray(v.value.addressable_data(0)) for v in model.weights]  # this process's replica
    with no_distribution():
        return uncompiled_copy(model, values)


def use_logical_cpus(count: int) -> None:
    """Split the CPU into ``count`` logical devices (must run before TensorFlow initialises devices)."""
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * count)
