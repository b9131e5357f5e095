"""``data=folder data.path=DIR``: a user's own texts in the aclImdb layout, DIR/train/<class>/*.txt and
DIR/test/<class>/*.txt (``texts.py``), registered as a data source with the core, with the checks a folder must
pass before anything runs (``layout.py``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from omegaconf import MISSING

from mha_project.extending import UNLABELED_TEXTS, config_check, data_source, settings
from mha_project.extras.folders.layout import check_folder_config


@settings("data")
@dataclass
class PathSettings:
    path: Optional[str] = MISSING  # data=folder: DIR; data=table: the file


@data_source("folder")
def load_folder(data_cfg, seed: int):
    from mha_project.extras.folders.texts import load_folder_splits

    return load_folder_splits(data_cfg)


def unlabeled_folder(data_cfg):
    from mha_project.extras.folders.texts import load_unlabeled

    return load_unlabeled(data_cfg)


UNLABELED_TEXTS["folder"] = unlabeled_folder  # DIR/train/unsup/*.txt (aclImdb has 50k there)

config_check(check_folder_config)
