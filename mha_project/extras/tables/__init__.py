"""``data=table``: texts and labels from a CSV, TSV, JSON-lines or Parquet file of the user's (``tables.py``:
``TableData``, the ``_target_`` of ``configs/data/table.yaml``), and its settings' check (``config.py``)."""
