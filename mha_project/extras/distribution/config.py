"""The devices' settings (``trainer/strategy=mirrored|data_parallel|multi_worker``) and their checks; no TensorFlow."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Optional

from omegaconf import MISSING

from mha_project.config import checked, keras_backend, optional, positive_int, store
from mha_project.errors import ConfigError
from mha_project.extras.distribution.processes import MULTI_WORKER_UNSUPPORTED, processes


@dataclass
class MirroredConfig:
    _target_: str = MISSING
    batch_size: int = MISSING
    cpu_devices: Optional[int] = checked(optional(positive_int), "null or an integer >= 1")


@dataclass
class DataParallelConfig:
    _target_: str = MISSING
    batch_size: int = MISSING
    join_timeout: int = checked(positive_int, "an integer >= 1 (seconds)")

    @staticmethod
    def check(strategy, cfg) -> None:
        backend = keras_backend()
        if backend != "jax":
            raise ConfigError(
                f"trainer/strategy=data_parallel is invalid with KERAS_BACKEND={backend}: it is keras.distribution, "
                "which trains on the JAX backend; run KERAS_BACKEND=jax python scripts/train.py ..."
            )
        n = processes()
        if n == 1:
            return
        if not os.environ.get("KERAS_DISTRIBUTION_JOB_ADDRESSES"):
            raise ConfigError(
                f"KERAS_DISTRIBUTION_NUM_PROCESSES={n} needs KERAS_DISTRIBUTION_JOB_ADDRESSES=HOST:PORT, the address "
                'of process 0, which coordinates (README "Keras backends and several devices")'
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


@dataclass
class MultiWorkerConfig:
    @staticmethod
    def check(strategy, cfg) -> None:
        raise ConfigError(MULTI_WORKER_UNSUPPORTED)


store("mirrored_schema", MirroredConfig, at="trainer.strategy")
store("data_parallel_schema", DataParallelConfig, at="trainer.strategy")
store("multi_worker_schema", MultiWorkerConfig, at="trainer.strategy")
