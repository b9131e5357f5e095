"""Hydra callbacks: validate the configuration before Hydra creates or writes any run directory.

``on_run_start`` runs before Hydra makes the run directory, so a bad value fails before any directory
exists. (Hydra writes no ``.hydra/`` into run directories here, ``hydra.output_subdir: null``; ``train()``
writes it once the run directory's identity is checked, see ``mha_project/run_dir.py``.)
In a multirun each job is validated by ``train()`` instead, so one bad job does not stop the sweep.
"""

from __future__ import annotations

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from mha_project.cli import fail
from mha_project.config import validate_config
from mha_project.errors import ConfigError


class ValidateConfig(Callback):
    def on_run_start(self, config: DictConfig, **kwargs) -> None:
        try:
            validate_config(config)
        except ConfigError as err:
            fail(str(err))
