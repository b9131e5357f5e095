"""``data=table``'s settings (``TableData``'s arguments) and their check; no pandas, no TensorFlow."""

import os
from dataclasses import dataclass
from typing import Optional

from omegaconf import MISSING

from mha_project.config import DataConfig, checked, optional, store
from mha_project.errors import ConfigError


@dataclass
class TableDataConfig(DataConfig):
    path: Optional[str] = MISSING  # the table file
    test_path: Optional[str] = MISSING
    test_fraction: Optional[float] = checked(optional(lambda v: 0 < v < 1), "null or a number in (0, 1)")
    text_column: str = MISSING
    label_column: str = MISSING

    @staticmethod
    def check(data, cfg) -> None:
        from mha_project.extras.tables.formats import table_format

        if not data.path:
            raise ConfigError("data=table needs data.path=FILE (a .csv, .tsv, .jsonl or .parquet file)")
        for key in ("path", "test_path"):
            path = data[key]
            if path is None:
                continue
            table_format(path, f"data.{key}")
            if not os.path.isfile(path):
                raise ConfigError(f"data.{key}={path} does not exist or is not a file")
        if data.test_path is None and data.test_fraction is None:
            raise ConfigError("data=table needs data.test_path=FILE or data.test_fraction (a number in (0, 1))")


store("table_schema", TableDataConfig, at="data")
