"""The devices a run trains on, for ``trainer.distribution``, and the processes that train it together.

The configured ``batch_size`` is the *global* batch: Keras splits each batch across the replicas (or the
processes), so changing the number of devices does not change the optimisation.

* ``mirrored``: ``tf.distribute.MirroredStrategy`` over the local GPUs (or logical CPUs), TensorFlow backend.
* ``data_parallel``: ``keras.distribution.DataParallel`` on the JAX backend, over this machine's devices
  and, when Keras's ``KERAS_DISTRIBUTION_JOB_ADDRESSES`` / ``_NUM_PROCESSES`` / ``_PROCESS_ID`` are set,
  over several processes (JAX's distributed runtime; gloo collectives on CPU). Each process feeds its
  slice of every global batch (``part`` in :func:`mha_project.data.pipeline.batch_token_ids`); after
  ``fit``, process 0 alone tests, saves and exports a :func:`local_copy` of the weights; the others train in
  a scratch directory and record nothing (:func:`train_as_helper`)."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import sys
import tempfile
import threading
from pathlib import Path

import keras
import numpy as np
import tensorflow as tf
from omegaconf import OmegaConf

from mha_project.errors import ConfigError
from mha_project.extras.distribution.processes import MULTI_WORKER_UNSUPPORTED, processes
from mha_project.model.classifier import uncompiled_copy
from mha_project.training.fitting import compile_classifier
from mha_project.training.reporting import stop_logging_into
from mha_project.training.train import train

log = logging.getLogger(__name__)


@dataclasses.dataclass
class KerasDistribution:
    """What the core asks of a tf.distribute strategy, for keras.distribution (which needs no scope)."""

    num_replicas_in_sync: int
    process_id: int = 0
    num_processes: int = 1

    def scope(self):
        return contextlib.nullcontext()


def make_strategy(trainer_cfg):
    """The strategy of ``trainer.distribution`` (on ``trainer.cpu_devices`` logical CPUs when set)."""
    if trainer_cfg.cpu_devices:
        use_logical_cpus(trainer_cfg.cpu_devices)
    strategy = _strategy(trainer_cfg.distribution, trainer_cfg.join_timeout)
    if trainer_cfg.distribution != "none":
        log.info(
            f"distribution: {trainer_cfg.distribution} · replicas {strategy.num_replicas_in_sync} · "
            f"global batch {trainer_cfg.batch_size}"
        )
    return strategy


def _strategy(name: str, join_timeout: int):
    if name == "none":
        return tf.distribute.get_strategy()  # the default (no-op) strategy
    if name == "mirrored":
        # All local GPUs; without GPUs, every logical CPU device (see use_logical_cpus).
        gpus = tf.config.list_logical_devices("GPU")
        devices = [d.name for d in (gpus or tf.config.list_logical_devices("CPU"))]
        return tf.distribute.MirroredStrategy(devices=devices)
    if name == "data_parallel":
        return _data_parallel(join_timeout)
    if name == "multi_worker":
        # Keras 3's model.fit fails under MultiWorkerMirroredStrategy ("Attempt to convert a value
        # (PerReplica...)"), reproduced here with two workers on 127.0.0.1 and reported upstream as
        # keras-team/keras#20585 / tensorflow/tensorflow#72388. Refuse in one line instead of crashing.
        raise ConfigError(MULTI_WORKER_UNSUPPORTED)
    raise ConfigError(f"trainer.distribution={name} is invalid: must be one of none, mirrored, data_parallel")


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
                "trainer.join_timeout",
                file=sys.stderr,
                flush=True,
            )
            os._exit(2)

    threading.Thread(target=give_up, name="join-timeout", daemon=True).start()
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


def train_as_helper(cfg, job) -> dict:
    """A process other than 0 trains the same model as process 0, in a scratch directory: it records nothing."""
    stop_logging_into(job.run_dir)  # not even in Hydra's train.log (the run dir may be process 0's)
    quiet = OmegaConf.merge(cfg, {"logger": {"tensorboard": False}})  # and its part ends with the fit (AFTER_FIT)
    with tempfile.TemporaryDirectory(prefix="mha-project-process-") as scratch:
        return train(quiet, job=dataclasses.replace(job, run_dir=Path(scratch), helper=True))


def on_process_zero_alone(cfg, model, plan):
    """After a fit of several processes, the trained weights on process 0's devices alone (compiled, for the
    test): what follows is one process's work, and Keras is told of no distribution from here on."""
    copy = local_copy(model)
    keras.distribution.set_distribution(None)
    compile_classifier(copy, cfg.trainer, plan.total_steps)
    return copy


@contextlib.contextmanager
def process_local(model):
    """``model`` itself, or with several processes its :func:`local_copy`, run without a distribution."""
    if not several_processes():
        yield model
        return
    with no_distribution():
        yield local_copy(model)


def use_logical_cpus(count: int) -> None:
    """Split the CPU into ``count`` logical devices (must run before TensorFlow initialises devices)."""
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * count)
