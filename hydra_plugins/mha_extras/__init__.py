"""How Hydra finds this project's configs, for ``@hydra.main`` and the compose API alike (Hydra scans the
``hydra_plugins`` namespace when it starts):

* the schemas: ``mha_project.config`` and each extra's ``config.py`` store their dataclasses in Hydra's
  ConfigStore when imported, as Hydra's own plugins store theirs; a group's YAML names its schema first;
* each extra's config groups (``mha_project/extras/<name>/configs/``) on the search path, after ``configs/``.

Deleting an extra's folder removes its groups and schemas with its code; nothing here names one."""

import importlib
from pathlib import Path

from hydra.core.config_search_path import ConfigSearchPath
from hydra.plugins.search_path_plugin import SearchPathPlugin

import mha_project.config  # noqa: F401  (the core's schemas; cheap: no TensorFlow)

EXTRAS = Path(mha_project.config.__file__).parent / "extras"

for _schema in sorted(EXTRAS.glob("*/config.py")):
    importlib.import_module(f"mha_project.extras.{_schema.parent.name}.config")  # dataclasses only


class ExtrasSearchPath(SearchPathPlugin):
    def manipulate_search_path(self, search_path: ConfigSearchPath) -> None:
        for configs in sorted(EXTRAS.glob("*/configs")):
            if configs.is_dir():
                search_path.append(provider=f"mha-project/{configs.parent.name}", path=f"file://{configs}")
