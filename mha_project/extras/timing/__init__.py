"""Speed read back from finished runs (``measures.py``): the time a run took to first reach a validation
accuracy (``scripts/time_to_accuracy.py``, ``scripts/benchmark.py --time-to-accuracy``) and its steady training
speed (the benchmarks, ``scripts/data_parallel_check.py``), from ``history.csv``'s ``elapsed_seconds``.
Registers nothing: tools that read what the core's fit writes."""
