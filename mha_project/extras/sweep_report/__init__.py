"""A sweep's report (``scripts/sweep_report.py``: ``report.py``): one row per job, the means over seeds, the plot of
accuracy against the swept keys, and more sections (an Optuna study's); a finished sweep names the command
(``callback.py``, a Hydra callback)."""
