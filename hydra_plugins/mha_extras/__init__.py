"""Each extra's own config groups (``mha_project/extras/<name>/configs/``) on Hydra's config search path, after
``configs/``: deleting an extra's folder removes its groups with its code. Hydra's ``SearchPathPlugin`` is the way
a library adds configs; found by Hydra's scan of the ``hydra_plugins`` namespace, for ``@hydra.main`` and the
compose API alike."""

from pathlib import Path

from hydra.core.config_search_path import ConfigSearchPath
from hydra.plugins.search_path_plugin import SearchPathPlugin


class ExtrasSearchPath(SearchPathPlugin):
    def manipulate_search_path(self, search_path: ConfigSearchPath) -> None:
        import mha_project  # cheap (no TensorFlow); the extras themselves are not imported here

        for configs in sorted((Path(mha_project.__file__).parent / "extras").glob("*/configs")):
            if configs.is_dir():
                search_path.append(provider=f"mha-project/{configs.parent.name}", path=f"file://{configs}")
