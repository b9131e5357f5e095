"""``data=table``: texts and labels from a CSV, TSV, JSON-lines or Parquet file of the user's (``tables.py``),
registered as a data source with the core, and its settings' check."""

import os
from dataclasses import dataclass
from typing import Optional

from omegaconf import MISSING

from mha_project.config import checked
from mha_project.errors import ConfigError
from mha_project.extending import config_check, data_source, settings


@settings("data")
@dataclass
class TableSettings:
    path: Optional[str] = MISSING  # the table file (data=folder: its DIR)
    test_path: Optional[str] = MISSING
    test_fraction: Optional[float] = checked(lambda v: v is None or 0 < v < 1, "null or a number in (0, 1)")
    text_column: str = MISSING
    label_column: str = MISSING


@data_source("table")
def load_table(data_cfg, seed: int):
    from mha_project.extras.tables.tables import load_table_splits

    return load_table_splits(data_cfg, seed)


@config_check
def check_table(cfg) -> None:
    if cfg.data.name != "table":
        return
    from mha_project.extras.tables.tables import table_format

    if not cfg.data.path:
        raise ConfigError("data=table needs data.path=FILE (a .csv, .tsv, .jsonl or .parquet file)")
    for key in ("path", "test_path"):
        path = cfg.data[key]
        if path is None:
            continue
        table_format(path, f"data.{key}")
        if not os.path.isfile(path):
            raise ConfigError(f"data.{key}={path} does not exist or is not a file")
    if cfg.data.test_path is None and cfg.data.test_fraction is None:
        raise ConfigError("data=table needs data.test_path=FILE or data.test_fraction (a number in (0, 1))")
