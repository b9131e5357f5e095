"""``data=folder``'s settings (``FolderData``'s arguments) and their check; standard library only."""

from dataclasses import dataclass

from omegaconf import MISSING

from mha_project.config import DataConfig, store
from mha_project.extras.folders.layout import check_folder_config


@dataclass
class FolderDataConfig(DataConfig):
    path: str = MISSING  # DIR/train/<class>/*.txt and DIR/test/<class>/*.txt

    @staticmethod
    def check(data, cfg) -> None:
        check_folder_config(data)


store("folder_schema", FolderDataConfig, at="data")
