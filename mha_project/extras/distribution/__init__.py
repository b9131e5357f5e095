"""Several devices and processes: ``trainer.distribution`` (``devices.py``), ``trainer.join_timeout``,
``trainer.cpu_devices``. ``mirrored`` is ``tf.distribute.MirroredStrategy`` over the local GPUs (or logical CPUs);
``data_parallel`` is ``keras.distribution.DataParallel`` on JAX, over this machine's devices and, with Keras's
``KERAS_DISTRIBUTION_*`` variables, over several processes. Registered with the core: the settings and their
checks, the strategy a run trains under, the other processes' part (the same fit in a scratch directory, which
records nothing) and process 0's copy of the trained weights for what it alone does after the fit."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Optional

from mha_project.config import checked, keras_backend, positive_int
from mha_project.errors import ConfigError
from mha_project.extending import AFTER_FIT, JOB_RUNNERS, PROCESS_LOCAL, STRATEGIES, config_check, settings
from mha_project.extras.distribution.processes import MULTI_WORKER_UNSUPPORTED, processes

DISTRIBUTIONS = ("none", "mirrored", "data_parallel", "multi_worker")


@settings("trainer")
@dataclass
class DistributionSettings:
    distribution: str = checked(lambda v: v in DISTRIBUTIONS, "one of " + ", ".join(DISTRIBUTIONS))
    join_timeout: int = checked(positive_int, "an integer >= 1 (seconds)")
    cpu_devices: Optional[int] = checked(lambda v: v is None or positive_int(v), "null or an integer >= 1")


@config_check
def check(cfg) -> None:
    if cfg.trainer.distribution == "multi_worker":
        raise ConfigError(MULTI_WORKER_UNSUPPORTED)
    if cfg.trainer.distribution != "data_parallel":
        return
    backend = keras_backend()
    if backend != "jax":
        raise ConfigError(
            f"trainer.distribution=data_parallel is invalid with KERAS_BACKEND={backend}: it is keras.distribution, "
            "which trains on the JAX backend; run KERAS_BACKEND=jax python scripts/train.py ..."
        )
    n = processes()
    if n == 1:
        return
    if not os.environ.get("KERAS_DISTRIBUTION_JOB_ADDRESSES"):
        raise ConfigError(
            f"KERAS_DISTRIBUTION_NUM_PROCESSES={n} needs KERAS_DISTRIBUTION_JOB_ADDRESSES=HOST:PORT, the address of "
            'process 0, which coordinates (README "Keras backends and several devices")'
        )
    process_id = os.environ.get("KERAS_DISTRIBUTION_PROCESS_ID", "")
    if not (process_id.isascii() and process_id.isdigit() and int(process_id) < n):
        raise ConfigError(
            f"KERAS_DISTRIBUTION_PROCESS_ID={process_id} is invalid with KERAS_DISTRIBUTION_NUM_PROCESSES={n}: "
            f"must be one of 0..{n - 1}, a different one on each machine"
        )
    # Every process must step through batches of one shape at once, and the same number of them.
    if cfg.data.bucketing:
        raise ConfigError(
            f"data.bucketing=true is invalid with {n} processes: each process's length buckets would give it "
            "other batch shapes and counts than the others; set data.bucketing=false"
        )
    if cfg.trainer.batch_size % n:
        raise ConfigError(
            f"batch_size={cfg.trainer.batch_size} is invalid with {n} processes: the global batch is split evenly "
            f"between them, so it must be a multiple of {n}"
        )


def strategy(cfg):
    if cfg.trainer.distribution == "none" and not cfg.trainer.cpu_devices:
        return None
    from mha_project.extras.distribution.devices import make_strategy

    return make_strategy(cfg.trainer)


def run_job(cfg, job):
    """A process other than 0 of a data-parallel run trains the same model in a scratch directory."""
    if cfg.trainer.distribution != "data_parallel" or job.process_id == 0 or job.helper:
        return None
    from mha_project.extras.distribution.devices import train_as_helper

    return train_as_helper(cfg, job)


def after_fit(cfg, job, model, plan):
    if cfg.trainer.distribution != "data_parallel" or job.num_processes == 1:
        return model
    if job.process_id != 0:
        return None  # the other processes' part ends with the fit; they record nothing
    from mha_project.extras.distribution.devices import on_process_zero_alone

    return on_process_zero_alone(cfg, model, plan)


def process_local(model):
    from mha_project.extras.distribution.devices import process_local

    return process_local(model)


STRATEGIES.append(strategy)
JOB_RUNNERS.append(run_job)
AFTER_FIT.append(after_fit)
PROCESS_LOCAL.append(process_local)
