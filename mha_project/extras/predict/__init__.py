"""``scripts/predict.py``: a finished run's predictions for every row of a table file (``predict.py``), read
and written with the ``tables`` extra's readers."""
