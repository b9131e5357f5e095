"""``data=table``'s source: the ``_target_`` of ``configs/data/table.yaml``."""

from __future__ import annotations

from mha_project.data.sources import TextData
from mha_project.extras.tables.tables import load_table_splits


class TableData(TextData):
    """``data=table data.path=FILE``: texts and labels from two columns of a CSV, TSV, JSON-lines or Parquet file;
    the test split from ``test_path``, or a seeded, stratified ``test_fraction`` of ``path``."""

    def __init__(self, path: str, text_column: str, label_column: str, test_path=None, test_fraction=None, **common):
        super().__init__(**common)
        self.path, self.text_column, self.label_column = path, text_column, label_column
        self.test_path, self.test_fraction = test_path, test_fraction

    def load(self, seed: int):
        return load_table_splits(self, seed)
