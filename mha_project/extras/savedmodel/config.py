"""The SavedModel extra's one setting: ``savedmodel.export`` (``export/`` in every run dir); no TensorFlow."""

from dataclasses import dataclass

from omegaconf import MISSING

from mha_project.config import store


@dataclass
class SavedModelConfig:
    export: bool = MISSING  # false: model.keras only


store("savedmodel_schema", SavedModelConfig, at="savedmodel")
