"""What ``train(cfg)`` knows of the process that runs it: read once, at the entry point, and passed down."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from omegaconf import DictConfig


@dataclasses.dataclass(frozen=True)
class Job:
    """Where the run goes and how it was started. ``hydra`` is Hydra's own config of the job (None outside
    Hydra), for the extras that read their part of it (a sweeper's trial). ``process_id`` / ``num_processes``
    are Keras's ``KERAS_DISTRIBUTION_*`` variables: the processes of one data-parallel run."""

    run_dir: Path
    in_sweep: bool = False
    num: int | None = None  # the job's number in a sweep
    sweep_dir: Path | None = None
    overrides: tuple[str, ...] = ()
    hydra: DictConfig | None = None
    process_id: int = 0
    num_processes: int = 1
    helper: bool = False  # a process other than 0 of a data-parallel run, training into a scratch directory

    @classmethod
    def of(cls, run_dir, **fields) -> Job:
        """A job outside Hydra (a test, a notebook) in ``run_dir``, with this process's Keras variables."""
        return cls(Path(run_dir), **{**_keras_processes(), **fields})

    @classmethod
    def from_hydra(cls) -> Job:
        """The job Hydra is running now (``@hydra.main``'s process)."""
        from hydra.core.hydra_config import HydraConfig
        from hydra.types import RunMode

        hydra_cfg = HydraConfig.get()
        in_sweep = hydra_cfg.mode == RunMode.MULTIRUN
        return cls(
            Path(hydra_cfg.runtime.output_dir),
            in_sweep=in_sweep,
            num=hydra_cfg.job.get("num"),
            sweep_dir=Path(hydra_cfg.sweep.dir) if in_sweep else None,
            overrides=tuple(hydra_cfg.overrides.task),
            hydra=hydra_cfg,
            **_keras_processes(),
        )


def _keras_processes() -> dict:
    process_id = os.environ.get("KERAS_DISTRIBUTION_PROCESS_ID", "0")
    processes = os.environ.get("KERAS_DISTRIBUTION_NUM_PROCESSES", "1")
    return dict(
        process_id=int(process_id) if process_id.isdigit() else 0,
        num_processes=int(processes) if processes.isdigit() else 1,
    )
