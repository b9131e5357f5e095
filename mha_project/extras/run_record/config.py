"""The run_record extra's settings: ``run_record.overwrite`` (``open_run``'s argument); no TensorFlow."""

from dataclasses import dataclass

from omegaconf import MISSING

from mha_project.config import store


@dataclass
class RunRecordConfig:
    _target_: str = MISSING
    _partial_: bool = MISSING
    overwrite: bool = MISSING  # true: replace a run dir that holds a different (or unfinished) run


store("run_record_schema", RunRecordConfig, at="run_record")
