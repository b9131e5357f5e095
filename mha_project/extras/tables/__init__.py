"""``data=table``: texts and labels from a CSV, TSV, JSON-lines or Parquet file of the user's (``tables.py``,
read by ``data.py``'s ``TableData``, the ``_target_`` of ``configs/data/table.yaml``), and its settings' check
(``config.py``)."""
