"""The TFDS datasets' settings (``TfdsData``'s arguments)."""

from dataclasses import dataclass
from typing import Optional

from omegaconf import MISSING

from mha_project.config import DataConfig, store


@dataclass
class TfdsDataConfig(DataConfig):
    tfds_name: str = MISSING  # imdb_reviews / ag_news_subset
    data_dir: Optional[str] = MISSING  # where TFDS keeps prepared data (null: ~/tensorflow_datasets)
    download: bool = MISSING  # TFDS may download when the data is not prepared yet


store("tfds_schema", TfdsDataConfig, at="data")
