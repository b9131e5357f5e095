"""``data=imdb`` and ``data=ag_news``: datasets of TensorFlow Datasets (``texts.py``), registered as data sources
with the core, with their settings (``data.tfds_name``, ``data.data_dir``, ``data.download``)."""

from dataclasses import dataclass
from typing import Optional

from omegaconf import MISSING

from mha_project.extending import UNLABELED_TEXTS, data_source, settings


@settings("data")
@dataclass
class TfdsSettings:
    tfds_name: Optional[str] = MISSING  # imdb_reviews / ag_news_subset
    data_dir: Optional[str] = MISSING  # where TFDS keeps prepared data (null: ~/tensorflow_datasets)
    download: bool = MISSING  # TFDS may download when the data is not prepared yet


@data_source("imdb")
@data_source("ag_news")
def load_tfds(data_cfg, seed: int):
    from mha_project.extras.tfds.texts import load_tfds_splits

    return load_tfds_splits(data_cfg)


def unlabeled_imdb(data_cfg):
    from mha_project.extras.tfds.texts import load_unlabeled

    return load_unlabeled(data_cfg)


UNLABELED_TEXTS["imdb"] = unlabeled_imdb  # IMDB's 50k reviews of TFDS's `unsupervised` split
